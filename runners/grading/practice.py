"""Practice runs: a student's file on the grading hardware, never graded.

A practice run runs the package's **public** tests only (the hidden ones never run, so nothing of
them reaches the report), in the same sandbox on the same kind of runner as a graded job. With
`timed` it adds one short timing: `PRACTICE_SHARE` of the grading's budget at the top worker
count alone, as a final run's turn (every timed answer checked). Its report says "Practice: not
graded" first and carries no points: the server stores it apart from grades (server/services/
intake/practice.py), so it can reach no board, quota, statistic, final run, export or LMS.
"""

from __future__ import annotations

from runners.protocol import GradeReport

PRACTICE_SHARE = 0.25
"""The part of a grading's timing budget a timed practice run spends (the top worker count)."""

HEADLINE = "Practice: not graded"


def practice_report(report: GradeReport) -> GradeReport:
    """`report` as a practice run's: marked, headed so, its points none."""
    notes = [*report.notes, "practice run: the public tests only (the hidden ones run when you "
             "submit)" + ("; one short timing at the top worker count: a graded submission is "
                          "timed at every worker count on its whole budget"
                          if report.speedup is not None else "")]
    return report.model_copy(update={
        "practice": True, "summary": f"{HEADLINE} · {report.summary}", "score": 0.0,
        "test_points": 0.0, "performance_points": 0.0, "notes": notes})
