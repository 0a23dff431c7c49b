"""Grade exports: a CSV per assignment, Gradescope's results.json per submission."""

from __future__ import annotations

import csv
import io
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from runners.protocol import Manifest
from server.models import (
    Assignment,
    AssignmentVersion,
    Enrollment,
    FinalGrade,
    GradeReportRow,
    Submission,
    User,
    aware,
)
from server.services.grades import late_days
from server.services.people import teams
from server.services.records import final_grades, manual_points

FORMULA_START = ("=", "+", "-", "@", "＝", "＋", "－", "＠")
"""What starts a formula in Excel, LibreOffice or Google Sheets; the
fullwidth forms count too (some locales evaluate them)."""
_IGNORED = "\ufeff\u200b\u200c\u200d\u2060\u00a0 ;,"
"""What a spreadsheet skips, or splits a cell at, before it looks for a formula: a byte-order
mark, zero-width and non-breaking spaces, spaces, and the separators of other locales (`;=…`
opened where `;` separates cells is a formula in the next one)."""


def csv_cell(value: object) -> object:
    """A cell a spreadsheet shows as text: one whose first meaningful character would start a
    formula, or that starts with a tab, CR, LF or other control character, gets a leading single
    quote (OWASP's advice). Every text cell is also written quoted (`QUOTE_NONNUMERIC`), so a
    separator inside it never splits it. Numbers are left alone (a negative number is data, and
    spreadsheets read it as a number either way).
    """
    if not isinstance(value, str) or not value:
        return value
    if not value[0].isprintable() or value.lstrip(_IGNORED).startswith(FORMULA_START):
        return "'" + value
    return value


def assignment_csv(*, session: Session, assignment: Assignment) -> str:
    """One row per enrolled student: best score, its verdict and speedup, the final run's
    points and speedup (once one is done), attempts; of the submissions the student shares
    (their own, their team's: people/teams.py)."""
    pairs = teams.sharers()
    rows = session.execute(
        select(User.id, User.email, User.name, Enrollment.alias, Submission.id, Submission.score,
               Submission.verdict, Submission.late, Submission.created_at,
               GradeReportRow.speedup_median, AssignmentVersion.version)
        .join(Enrollment, (Enrollment.user_id == User.id)
              & (Enrollment.course_id == assignment.course_id))
        .outerjoin(pairs, pairs.c.uid == User.id)
        .outerjoin(Submission, (Submission.id == pairs.c.sid)
                   & (Submission.assignment_id == assignment.id))
        .outerjoin(GradeReportRow, GradeReportRow.submission_id == Submission.id)
        .outerjoin(AssignmentVersion, AssignmentVersion.id == Submission.version_id)
        .where(Enrollment.role == "student").order_by(User.email, Submission.id))
    best: dict[str, dict[str, Any]] = {}
    for user_id, email, name, alias, sid, score, verdict, late, created, speedup, version in rows:
        entry = best.setdefault(email, {"user_id": user_id, "email": email, "name": name,
                                        "alias": alias or "",
                                        "attempts": 0, "best_score": "", "verdict": "",
                                        "speedup": "", "late": "", "submission_id": "",
                                        "submitted_at": "", "version": ""})
        if sid is None:
            continue
        entry["attempts"] += 1
        if score is not None and (entry["best_score"] == "" or score > entry["best_score"]):
            entry.update(best_score=score, verdict=verdict or "", submission_id=sid,
                         speedup="" if speedup is None else speedup, late="yes" if late else "",
                         submitted_at=aware(created).isoformat(), version=version or "")
    settled = final_grades.grades(session=session, assignment_id=assignment.id)
    by_hand = manual_points.released_points(session=session, assignment=assignment)
    for entry in best.values():
        user_id = entry.pop("user_id")
        final = settled.get(user_id)
        entry["final_score"] = "" if final is None else final.score
        entry["final_speedup"] = "" if final is None or final.speedup is None else final.speedup
        entry["manual_points"] = by_hand.get(user_id, "")
        entry["late_days_used"] = (late_days.spent_on(session=session, assignment=assignment,
                                                      user_id=user_id)
                                   if assignment.course.late_days else "")
        auto = entry["final_score"] if final is not None else entry["best_score"]
        entry["total"] = ("" if auto == "" and user_id not in by_hand
                          else round(float(auto or 0) + by_hand.get(user_id, 0.0), 2))
    out = io.StringIO()
    fields = ["email", "name", "alias", "best_score", "verdict", "speedup", "final_score",
              "final_speedup", "manual_points", "total", "late", "late_days_used", "attempts",
              "submission_id", "submitted_at", "version"]
    writer = csv.DictWriter(out, fieldnames=fields, quoting=csv.QUOTE_NONNUMERIC)
    writer.writeheader()
    for email in sorted(best):
        writer.writerow({k: csv_cell(v) for k, v in best[email].items()})
    return out.getvalue()


def gradescope(*, report: dict[str, Any], score: float, manifest: Manifest,
               final: FinalGrade | None = None, manual: tuple[float, float] | None = None
               ) -> dict[str, Any]:
    """A Gradescope autograder results.json for one graded submission; `final`: the final run's
    grade of it (its points replace the live grading's performance points); `manual`: the
    released manual points and their most, added as one more entry."""
    tests = report.get("tests", [])
    weights = sum(t["weight"] for t in tests) or 1.0
    test_max = manifest.scoring.test_points
    perf_max = manifest.scoring.performance_points
    results: list[dict[str, Any]] = []
    for t in tests:
        share = round(test_max * t["weight"] / weights, 2)
        results.append({"name": t["name"], "max_score": share,
                        "score": share if t["outcome"] == "passed" else 0.0,
                        "status": "passed" if t["outcome"] == "passed" else "failed",
                        "output": t["message"],
                        "visibility": "after_published" if t["hidden"] else "visible"})
    sp = report.get("speedup")
    live = (f"{sp['median']:.2f}× (95 % CI {sp['ci_low']:.2f}–{sp['ci_high']:.2f})"
            if sp else "not measured")
    perf = report.get("performance_points", 0.0)
    if final is not None:
        score = final.score
        perf = round(final.score - report.get("test_points", 0.0), 2)
        live = (("final run: no speedup earned" if final.speedup is None else
                 f"final run: {final.speedup:.2f}×, the median of {final.turns} rounds "
                 f"({final.range_low:.2f}–{final.range_high:.2f})") + f"; live grading: {live}")
    results.append({"name": "performance (speedup)", "max_score": perf_max, "score": perf,
                    "status": "passed" if sp else "failed", "output": live})
    if manual is not None:
        score = round(score + manual[0], 2)
        results.append({"name": "graded by hand (rubric)", "max_score": manual[1],
                         "score": manual[0], "status": "passed",
                         "output": "the rubric items a grader applied, released"})
    out: dict[str, Any] = {"score": score, "output": report.get("summary", ""),
                           "execution_time": round(report.get("wall_time_s", 0)),
                           "tests": results}
    if sp:
        out["leaderboard"] = [{"name": "speedup", "value": sp["median"], "order": "desc"}]
    return out
