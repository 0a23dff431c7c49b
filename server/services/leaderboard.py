"""Leaderboard: each student's best fully-correct submission, ranked by speedup; CI overlap = tie."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from server.models import Assignment, Enrollment, GradeReportRow, Submission


@dataclass(frozen=True)
class Entry:
    rank: int
    tied: bool
    user_id: int
    alias: str
    submission_id: int
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    score: float


def entries(*, session: Session, assignment: Assignment) -> list[Entry]:
    """Ranked entries; an entry whose CI overlaps the one above shares its rank.

    Each student's best passed submission (highest speedup, then score, then the earliest) is
    picked in the database with a window function, so only one row per student comes back,
    however many graded submissions the assignment holds.
    """
    speedup = func.coalesce(GradeReportRow.speedup_median, -1.0)
    ranked = (
        select(Submission.user_id, Submission.id.label("submission_id"), GradeReportRow.score,
               speedup.label("speed"), GradeReportRow.speedup_ci_low, GradeReportRow.speedup_ci_high,
               Enrollment.alias,
               func.row_number().over(partition_by=Submission.user_id,
                                      order_by=(speedup.desc(), GradeReportRow.score.desc(),
                                                Submission.id)).label("nth"))
        .join(GradeReportRow, GradeReportRow.submission_id == Submission.id)
        .join(Enrollment, (Enrollment.user_id == Submission.user_id)
              & (Enrollment.course_id == assignment.course_id))
        .where(Submission.assignment_id == assignment.id, GradeReportRow.verdict == "passed",
               Enrollment.role == "student")
        .subquery())
    rows = session.execute(
        select(ranked.c.user_id, ranked.c.submission_id, ranked.c.score, ranked.c.speed,
               ranked.c.speedup_ci_low, ranked.c.speedup_ci_high, ranked.c.alias)
        .where(ranked.c.nth == 1))
    best: dict[int, tuple[float, float, int, float | None, float | None, str | None]] = {
        user_id: (float(sp), score, sub_id, lo, hi, alias)
        for user_id, sub_id, score, sp, lo, hi, alias in rows}
    ordered = sorted(best.items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[1][2]))
    out: list[Entry] = []
    for i, (user_id, (sp, score, sub_id, lo, hi, alias)) in enumerate(ordered):
        speed = sp if sp >= 0 else None
        tied = False
        rank = i + 1
        if out and speed is not None and out[-1].speedup is not None and lo is not None \
                and out[-1].ci_low is not None and hi is not None and hi >= out[-1].ci_low:
            tied, rank = True, out[-1].rank
            if not out[-1].tied:
                out[-1] = replace(out[-1], tied=True)
        out.append(Entry(rank=rank, tied=tied, user_id=user_id,
                         alias=alias or f"student-{user_id}", submission_id=sub_id,
                         speedup=speed, ci_low=lo, ci_high=hi, score=score))
    return out
