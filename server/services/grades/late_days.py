"""Late days: a pool per student for the whole course (`Course.late_days`) that a late
submission spends instead of taking the late policy.

A submission `h` hours past its students' own deadline (extensions included) needs ceil(h / 24)
days. What an assignment has taken from a student's pool is the most any of their submissions
to it needed (`Submission.late_days`): a second upload two days late, after one a day late,
takes one day more, not two. An upload is covered, and so not late, when the days it needs are
within the course's most per assignment and each of its students has the days more it takes;
else it is late and the late policy applies, and it takes nothing. A student confirms first
(`Quote.said`: "this uses 2 of your 3 remaining late days"). A team's submission is charged to
every member: it is covered only if each member has the days.

Days spent are counted under each student's upload lock (the one the quota takes), so uploads at
once never spend more than the pool. The staff give days back (`grant`, audited). An extension
moves the count: the covered submissions' days are counted again against the new deadline and
never grow (`restate`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from server.models import (
    Assignment,
    AuditLog,
    Course,
    LateDayGrant,
    Submission,
    User,
    now,
)
from server.services.grades import extensions
from server.services.people import courses, teams
from server.services.records.errors import Forbidden, Invalid

MAX_POOL = 365
REASON_MAX = 500


@dataclass(frozen=True)
class Balance:
    pool: int
    granted: int
    spent: int

    @property
    def left(self) -> int:
        return max(self.pool + self.granted - self.spent, 0)


@dataclass(frozen=True)
class Quote:
    """What an upload now would do with late days."""

    needed: int
    """Days late, counted in whole days (0: on time)."""
    extra: int
    """Days more it takes from the pool (the most among its students)."""
    covered: bool
    """It is not late: its days are within the pool and the per-assignment most."""
    said: str
    """The sentence a student reads before confirming ('' where no days are involved)."""


def spent_on(*, session: Session, assignment: Assignment, user_id: int) -> int:
    """Days this assignment took from the student's pool."""
    return session.scalar(select(func.max(Submission.late_days)).where(
        Submission.assignment_id == assignment.id, teams.shared(user_id))) or 0


def balance(*, session: Session, course: Course, user_id: int) -> Balance:
    granted = session.scalar(select(func.sum(LateDayGrant.days)).where(
        LateDayGrant.course_id == course.id, LateDayGrant.user_id == user_id)) or 0
    spent = sum(spent_on(session=session, assignment=a, user_id=user_id)
                for a in session.scalars(select(Assignment).where(
                    Assignment.course_id == course.id)))
    return Balance(course.late_days, int(granted), spent)


def left_by_email(*, session: Session, course: Course) -> dict[str, int]:
    """Each student's days left ({} where the course has no late days)."""
    if not course.late_days:
        return {}
    return {u.email: balance(session=session, course=course, user_id=u.id).left
            for u in courses.students(session=session, course=course)}


def quote(*, session: Session, assignment: Assignment, user_ids: list[int],
          deadline: datetime | None, at: datetime) -> Quote:
    """What an upload at `at` by these students (a team's members, or one) does with days."""
    course = assignment.course
    days = extensions.days_late(deadline, at)
    if days == 0 or course.late_days == 0:
        return Quote(days, 0, days == 0, "")
    cap = course.late_days_per_assignment
    extras, lefts = [], []
    for uid in user_ids:
        extras.append(max(days - spent_on(session=session, assignment=assignment, user_id=uid),
                          0))
        lefts.append(balance(session=session, course=course, user_id=uid).left)
    extra = max(extras)
    day_s = f"{days} day{'s' * (days != 1)}"
    if cap is not None and days > cap:
        return Quote(days, 0, False, f"this upload is {day_s} late, more than the "
                     f"{cap} late days one assignment may take: it counts as late")
    if any(e > left for e, left in zip(extras, lefts, strict=True)):
        who = "your" if len(user_ids) == 1 else "a member's"
        return Quote(days, 0, False, f"this upload is {day_s} late and needs {extra} more late "
                     f"day{'s' * (extra != 1)}, more than {who} {min(lefts)} remaining: it "
                     "counts as late")
    if extra == 0:
        return Quote(days, 0, True, f"this upload is {day_s} late: covered by the late days "
                     "this assignment already took")
    each = "" if len(user_ids) == 1 else " (and as many of each member's)"
    return Quote(days, extra, True, f"this upload uses {extra} of your {lefts[0]} remaining "
                 f"late day{'s' * (lefts[0] != 1)}{each}; after that the late penalty applies")


def quote_now(*, session: Session, assignment: Assignment, user: User) -> Quote:
    """What an upload of `user`'s now would do with late days (their team's members charged
    too, against their own deadline)."""
    team = (teams.team_of(session=session, user_id=user.id, assignment_id=assignment.id)
            if teams.team_work(assignment) else None)
    return quote(session=session, assignment=assignment,
                 user_ids=[m.user_id for m in teams.members(team)] if team else [user.id],
                 deadline=extensions.deadline_for(session=session, assignment=assignment,
                                                  user_id=user.id), at=now())


def grant(*, session: Session, course: Course, actor: User, role: str | None, student: User,
          days: int, reason: str) -> LateDayGrant:
    """Give a student late days (back), with the reason; instructors and TAs."""
    if not courses.is_staff(role):
        raise Forbidden("only the course's instructors and TAs give late days")
    if not 1 <= days <= MAX_POOL:
        raise Invalid(f"give 1 to {MAX_POOL} days")
    if not reason.strip() or len(reason) > REASON_MAX:
        raise Invalid(f"say why, in at most {REASON_MAX} characters")
    g = LateDayGrant(course_id=course.id, user_id=student.id, days=days, reason=reason.strip(),
                     actor_id=actor.id)
    session.add(g)
    session.add(AuditLog(actor_id=actor.id, action="late_days.grant", target=course.slug,
                         detail={"student": student.email, "days": days,
                                 "reason": reason.strip()}))
    session.flush()
    return g


def set_policy(*, session: Session, course: Course, actor: User, role: str | None, pool: int,
               per_assignment: int | None) -> None:
    """The course's pool per student and the most one assignment may take (instructors)."""
    if role != "instructor":
        raise Forbidden("only the course's instructors set the late days")
    if not 0 <= pool <= MAX_POOL or (per_assignment is not None
                                     and not 1 <= per_assignment <= MAX_POOL):
        raise Invalid(f"a pool of 0 to {MAX_POOL} days; at most 1 to {MAX_POOL} per assignment")
    before = (course.late_days, course.late_days_per_assignment)
    course.late_days, course.late_days_per_assignment = pool, per_assignment
    session.add(AuditLog(actor_id=actor.id, action="late_days.policy", target=course.slug,
                         detail={"before": list(before), "after": [pool, per_assignment]}))
    session.flush()

