"""What a student's manual grade adds to their points (services/by_hand/manual.py): the items applied,
summed within 0 and the assignment's manual points, times its weight; only for grades done, and
only once the instructor released them. Exports, the LMS passback and the pages read it here
(this module imports nothing but the tables, so that each of them can)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from server.models import AppliedItem, Assignment, BoardEntry, ManualGrade, RubricItem


def _within(assignment: Assignment, total: float) -> float:
    """A sum of applied items' points, within 0 and the assignment's manual points."""
    return min(max(total, 0.0), assignment.manual_points)


def points(assignment: Assignment, items: list[RubricItem]) -> float:
    """The manual points of these items applied: their sum, within 0 and the manual points."""
    return round(_within(assignment, sum(i.points for i in items)), 2)


def released_points(*, session: Session, assignment: Assignment, user_id: int | None = None,
                    submission_id: int | None = None) -> dict[int, float]:
    """Each student's manual points times the weight, for grades done, once released ({}
    before): what exports, the board's totals and the LMS add to the autograder's points. A
    team's submission is graded once: its grade's points are every member's whose board
    submission it is. `submission_id`: only a grade that read this very submission."""
    if assignment.manual_released_at is None:
        return {}
    q = (select(ManualGrade.user_id, ManualGrade.submission_id,
                func.coalesce(func.sum(RubricItem.points), 0.0))
         .outerjoin(AppliedItem, AppliedItem.grade_id == ManualGrade.id)
         .outerjoin(RubricItem, RubricItem.id == AppliedItem.item_id)
         .where(ManualGrade.assignment_id == assignment.id, ManualGrade.status == "done")
         .group_by(ManualGrade.id, ManualGrade.user_id, ManualGrade.submission_id))
    if submission_id is not None:
        q = q.where(ManualGrade.submission_id == submission_id)
    graded = session.execute(q).all()
    holders: dict[int, list[int]] = {}
    for uid, sid in session.execute(select(BoardEntry.user_id, BoardEntry.submission_id).where(
            BoardEntry.assignment_id == assignment.id,
            BoardEntry.submission_id.in_({sid for _, sid, _ in graded}))):
        holders.setdefault(sid, []).append(uid)
    out: dict[int, float] = {}
    for uid, sid, total in graded:
        value = round(_within(assignment, float(total)) * assignment.manual_weight, 2)
        for who in {uid, *holders.get(sid, [])}:
            out.setdefault(who, value)
    return {uid: v for uid, v in out.items() if user_id is None or uid == user_id}


def max_points(assignment: Assignment) -> float:
    """The most a released manual grade adds (0 before release: the gradebook's maximum is the
    autograder's alone until then)."""
    if assignment.manual_released_at is None:
        return 0.0
    return round(assignment.manual_points * assignment.manual_weight, 2)
