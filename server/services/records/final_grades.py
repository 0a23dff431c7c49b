"""The final grades that stand: each student's from the assignment's latest finished final run
(services/grades/finals.py makes them). What shows a grade reads them here: the leaderboard, exports,
the LMS passback, the pages."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from server.models import FinalGrade, FinalRun, Submission


def _latest(assignment_id: int) -> Any:
    """The id of the assignment's latest finished final run."""
    return (select(FinalRun.id).where(FinalRun.assignment_id == assignment_id,
                                      FinalRun.status == "done")
            .order_by(FinalRun.id.desc()).limit(1).scalar_subquery())


def grades(*, session: Session, assignment_id: int) -> dict[int, FinalGrade]:
    """Each student's final grade from the assignment's latest finished final run ({}: none)."""
    return {g.user_id: g for g in session.scalars(
        select(FinalGrade).where(FinalGrade.run_id == _latest(assignment_id)))}


def grade_of(*, session: Session, assignment_id: int, user_id: int) -> FinalGrade | None:
    """One student's final grade from that run (None: it settled none of theirs, or none ran)."""
    return session.get(FinalGrade, (session.scalar(select(_latest(assignment_id))), user_id))


def settled(*, session: Session, sub: Submission) -> FinalGrade | None:
    """The final grade that settled this submission's points (its student's, from the latest
    finished run, where that run timed this very submission)."""
    grade = grade_of(session=session, assignment_id=sub.assignment_id, user_id=sub.user_id)
    return grade if grade is not None and grade.submission_id == sub.id else None
