"""What a student's manual grade adds to their points (services/by_hand/manual.py): the items applied,
summed within 0 and the assignment's manual points, times its weight; only for grades done, and
only once the instructor released them. Exports, the LMS passback and the pages read it here
(this module imports nothing but the tables, so that each of them can)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from server.models import AppliedItem, Assignment, ManualGrade, RubricItem


def _within(assignment: Assignment, total: float) -> float:
    """A sum of applied items' points, within 0 and the assignment's manual points."""
    return min(max(total, 0.0), assignment.manual_points)


def points(assignment: Assignment, items: list[RubricItem]) -> float:
    """The manual points of these items applied: their sum, within 0 and the manual points."""
    return round(_within(assignment, sum(i.points for i in items)), 2)


def released_points(*, session: Session, assignment: Assignment, user_id: int | None = None,
                    submission_id: int | None = None) -> dict[int, float]:
    """Each student's manual points times the weight, for grades done, once released ({}
    before): what exports, the board's totals and the LMS add to the autograder's points.
    `submission_id`: only a grade that read this very submission."""
    if assignment.manual_released_at is None:
        return {}
    q = (select(ManualGrade.user_id, func.coalesce(func.sum(RubricItem.points), 0.0))
         .outerjoin(AppliedItem, AppliedItem.grade_id == ManualGrade.id)
         .outerjoin(RubricItem, RubricItem.id == AppliedItem.item_id)
         .where(ManualGrade.assignment_id == assignment.id, ManualGrade.status == "done")
         .group_by(ManualGrade.user_id))
    if user_id is not None:
        q = q.where(ManualGrade.user_id == user_id)
    if submission_id is not None:
        q = q.where(ManualGrade.submission_id == submission_id)
    sums = dict(session.execute(q).all())
    return {uid: round(_within(assignment, float(s)) * assignment.manual_weight, 2)
            for uid, s in sums.items()}


def max_points(assignment: Assignment) -> float:
    """The most a released manual grade adds (0 before release: the gradebook's maximum is the
    autograder's alone until then)."""
    if assignment.manual_released_at is None:
        return 0.0
    return round(assignment.manual_points * assignment.manual_weight, 2)
