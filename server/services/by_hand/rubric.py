"""An assignment's rubric and the rules of its manual part: items a grader applies (points,
positive or negative, grouped, with a text the student reads), the most manual points a student
can get, their weight beside the autograder's points, and how many regrade requests a student
may have open. Any of the course's staff writes items; only its instructors set the points,
the weight and the limit. An item's points and text are read where it is applied, never
copied: editing it changes every grade it is applied to, and `uses` says how many first."""

from __future__ import annotations

import math

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from server.models import AppliedItem, Assignment, AuditLog, RubricItem, User
from server.services.grades import grade_changes
from server.services.people import courses
from server.services.records.errors import Forbidden, Invalid, NotFound

MAX_ITEMS = 200
MAX_POINTS = 1000.0
"""An item's points, and an assignment's manual points, lie within ± this."""


def items(*, session: Session, assignment: Assignment) -> list[RubricItem]:
    """The rubric in its order: by group as first written, then position."""
    return list(session.scalars(select(RubricItem).where(RubricItem.assignment_id == assignment.id)
                                .order_by(RubricItem.position, RubricItem.id)))


def over_the_most(*, session: Session, assignment: Assignment) -> str | None:
    """A warning where the rubric's items can add up to more than hand grading may give (its
    "manual points at most"): the points beyond it count for nothing."""
    can = sum(i.points for i in items(session=session, assignment=assignment) if i.points > 0)
    if can <= assignment.manual_points:
        return None
    return (f"the rubric's items add up to {can:g} points but hand grading may give at most "
            f"{assignment.manual_points:g}: raise \"manual points at most\", or the points "
            "beyond it count for nothing")


def get(*, session: Session, assignment: Assignment, item_id: int) -> RubricItem:
    item = session.get(RubricItem, item_id)
    if item is None or item.assignment_id != assignment.id:
        raise NotFound(f"no rubric item {item_id} in {assignment.slug}")
    return item


def _points(points: float) -> float:
    if not math.isfinite(points) or abs(points) > MAX_POINTS:
        raise Invalid(f"an item's points lie between -{MAX_POINTS:g} and {MAX_POINTS:g}")
    return round(points, 2)


def _staff(role: str | None, what: str) -> None:
    if not courses.is_staff(role):
        raise Forbidden(f"only the course's instructors and TAs {what}")


def _log(session: Session, actor: User, action: str, assignment: Assignment,
         detail: dict[str, object]) -> None:
    session.add(AuditLog(actor_id=actor.id, action=action,
                         target=f"{assignment.course.slug}/{assignment.slug}", detail=detail))


def add(*, session: Session, assignment: Assignment, actor: User, role: str | None,
        title: str, points: float, group: str = "", description: str = "") -> RubricItem:
    _staff(role, "write the rubric")
    count = session.scalar(select(func.count()).select_from(RubricItem)
                           .where(RubricItem.assignment_id == assignment.id)) or 0
    if count >= MAX_ITEMS:
        raise Invalid(f"a rubric holds at most {MAX_ITEMS} items")
    item = RubricItem(assignment_id=assignment.id, group=group.strip(), title=title.strip(),
                      description=description, points=_points(points), position=count)
    session.add(item)
    session.flush()
    _log(session, actor, "rubric.add", assignment, {"item": item.id, "points": item.points})
    return item


def uses(*, session: Session, item: RubricItem) -> int:
    """How many students' grades the item is applied to (what editing it changes)."""
    return session.scalar(select(func.count()).select_from(AppliedItem)
                          .where(AppliedItem.item_id == item.id)) or 0


def edit(*, session: Session, assignment: Assignment, item: RubricItem, actor: User,
         role: str | None, title: str | None = None, points: float | None = None,
         group: str | None = None, description: str | None = None) -> int:
    """Change an item for every grade it is applied to; how many that is."""
    _staff(role, "write the rubric")
    before = {"title": item.title, "points": item.points}
    if title is not None:
        item.title = title.strip()
    if points is not None:
        item.points = _points(points)
    if group is not None:
        item.group = group.strip()
    if description is not None:
        item.description = description
    changed = uses(session=session, item=item)
    _log(session, actor, "rubric.edit", assignment,
         {"item": item.id, "before": before, "points": item.points, "grades": changed})
    session.flush()
    _follow(session, assignment, changed)
    return changed


def _follow(session: Session, assignment: Assignment, changed: int) -> None:
    """Released grades changed: the boards' totals and the LMS gradebooks follow."""
    if changed and assignment.manual_released_at is not None:
        grade_changes.of_everyone(session=session, assignment_id=assignment.id)


def remove(*, session: Session, assignment: Assignment, item: RubricItem, actor: User,
           role: str | None) -> int:
    """Delete an item, and with it its points from every grade it was applied to."""
    _staff(role, "write the rubric")
    changed = uses(session=session, item=item)
    _log(session, actor, "rubric.remove", assignment,
         {"item": item.id, "title": item.title, "points": item.points, "grades": changed})
    session.delete(item)
    session.flush()
    _follow(session, assignment, changed)
    return changed


def configure(*, session: Session, assignment: Assignment, actor: User, role: str | None,
              points: float | None = None, weight: float | None = None,
              regrade_limit: int | None = None, anonymous: bool | None = None) -> None:
    """The manual part's rules (instructors only)."""
    if role != "instructor":
        raise Forbidden("only the course's instructors set the manual points, their weight and "
                        "the regrade requests' limit")
    if points is not None:
        if not math.isfinite(points) or not 0 <= points <= MAX_POINTS:
            raise Invalid(f"manual points lie between 0 and {MAX_POINTS:g}")
        assignment.manual_points = round(points, 2)
    if weight is not None:
        if not math.isfinite(weight) or not 0 <= weight <= 10:
            raise Invalid("the manual points' weight lies between 0 and 10")
        assignment.manual_weight = weight
    if regrade_limit is not None:
        if not 0 <= regrade_limit <= 100:
            raise Invalid("a student may have between 0 and 100 regrade requests open")
        assignment.regrade_limit = regrade_limit
    if anonymous is not None:
        assignment.manual_anonymous = anonymous
    _log(session, actor, "manual.configure", assignment,
         {"points": assignment.manual_points, "weight": assignment.manual_weight,
          "regrade_limit": assignment.regrade_limit, "anonymous": assignment.manual_anonymous})
    session.flush()
    _follow(session, assignment, 1)
