"""Late days over the API (services/grades/late_days.py): a course's policy, each student's
balance, days given back, and what an upload now would spend."""

from __future__ import annotations

from fastapi import APIRouter, status
from pydantic import Field

from server.db import committing
from server.deps import CourseDep, CourseInstructorDep, CourseStaffDep, SessionDep
from server.models import User
from server.schemas import ErrorPublic, Input, Public
from server.services.grades import late_days
from server.services.packages import assignments as assignment_service
from server.services.people import courses as course_service
from server.services.records.errors import Forbidden

router = APIRouter(prefix="/api/courses", tags=["late days"],
                   responses={401: {"model": ErrorPublic}, 403: {"model": ErrorPublic},
                              404: {"model": ErrorPublic}, 422: {"model": ErrorPublic}})


class PolicyIn(Input):
    pool: int = Field(ge=0, le=late_days.MAX_POOL, description="Each student's late days for "
                      "the whole course (0: none)")
    per_assignment: int | None = Field(default=None, ge=1, le=late_days.MAX_POOL,
                                       description="The most one assignment may take")


class BalancePublic(Public):
    email: str
    pool: int
    per_assignment: int | None
    granted: int
    spent: int
    left: int


class GrantIn(Input):
    email: str = Field(min_length=3, max_length=320)
    days: int = Field(ge=1, le=late_days.MAX_POOL)
    reason: str = Field(min_length=1, max_length=late_days.REASON_MAX)


class QuotePublic(Public):
    needed: int = Field(description="Days late an upload now is (0: on time)")
    extra: int = Field(description="Days more it takes from your pool")
    covered: bool = Field(description="It is not late: late days cover it")
    said: str


def _balance(access: CourseDep, session: SessionDep, user: User) -> BalancePublic:
    c = access.course
    b = late_days.balance(session=session, course=c, user_id=user.id)
    return BalancePublic(email=user.email, pool=b.pool, per_assignment=c.late_days_per_assignment,
                         granted=b.granted, spent=b.spent, left=b.left)


@router.get("/{course}/late-days", response_model=list[BalancePublic])
def balances(access: CourseDep, session: SessionDep) -> list[BalancePublic]:
    """Your late days (a student); every student's (the course's staff)."""
    who = (course_service.students(session=session, course=access.course)
           if course_service.is_staff(access.role) else [access.user])
    return [_balance(access, session, u) for u in who]


@router.put("/{course}/late-days", response_model=list[BalancePublic])
def policy(body: PolicyIn, access: CourseInstructorDep,
           session: SessionDep) -> list[BalancePublic]:
    """Set the course's pool per student and the most one assignment may take."""
    with committing(session):
        late_days.set_policy(session=session, course=access.course, actor=access.user,
                             role=access.role, pool=body.pool, per_assignment=body.per_assignment)
    return balances(access, session)


@router.post("/{course}/late-days/grants", response_model=BalancePublic,
             status_code=status.HTTP_201_CREATED)
def grant(body: GrantIn, access: CourseStaffDep, session: SessionDep) -> BalancePublic:
    """Give a student late days (back), with the reason (audit-logged)."""
    with committing(session):
        student = course_service.student(session=session, course=access.course, email=body.email)
        late_days.grant(session=session, course=access.course, actor=access.user,
                        role=access.role, student=student, days=body.days, reason=body.reason)
    return _balance(access, session, student)


@router.get("/{course}/assignments/{slug}/late-days", response_model=QuotePublic)
def quote(slug: str, access: CourseDep, session: SessionDep) -> QuotePublic:
    """What an upload of yours now would do with late days (confirm with spend_late_days)."""
    if access.role != "student":
        raise Forbidden("late days are a student's")
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    q = late_days.quote_now(session=session, assignment=a, user=access.user)
    return QuotePublic(needed=q.needed, extra=q.extra, covered=q.covered, said=q.said)
