"""Late days on the course's people page (/c/COURSE/-/members#late-days): the instructors' policy
and days the staff give back (services/grades/late_days.py)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from server.db import committing
from server.deps import SessionDep
from server.services.grades import late_days
from server.services.people import courses as course_service
from server.services.records.errors import DomainError, Invalid
from server.web.admin import course_for, render_members
from server.web.plumbing import Csrf, PageUser, form_number

router = APIRouter(include_in_schema=False)


@router.post("/c/{course}/-/late-days", dependencies=[Csrf])
def policy(course: str, request: Request, session: SessionDep, user: PageUser,
           pool: Annotated[str, Form()], per_assignment: Annotated[str, Form()] = "") -> Response:
    c, role = course_for(session, user, course)
    try:
        days = 0 if pool.strip() == "0" else form_number(pool, high=late_days.MAX_POOL)
        most = form_number(per_assignment, high=late_days.MAX_POOL) if per_assignment.strip() \
            else None
        if days is None or (per_assignment.strip() and most is None):
            raise Invalid(f"late days are whole numbers, 0 to {late_days.MAX_POOL}")
        with committing(session):
            late_days.set_policy(session=session, course=c, actor=user, role=role, pool=days,
                                 per_assignment=most)
    except DomainError as exc:
        return render_members(request, session, user, course, status_code=exc.status,
                        error=exc.message)
    return RedirectResponse(f"/c/{c.slug}/-/members#late-days", status_code=303)


@router.post("/c/{course}/-/late-days/grant", dependencies=[Csrf])
def grant(course: str, request: Request, session: SessionDep, user: PageUser,
          email: Annotated[str, Form()], days: Annotated[str, Form()],
          reason: Annotated[str, Form()]) -> Response:
    c, role = course_for(session, user, course, staff=True)
    try:
        n = form_number(days, high=late_days.MAX_POOL)
        if n is None:
            raise Invalid(f"give 1 to {late_days.MAX_POOL} days")
        with committing(session):
            student = course_service.student(session=session, course=c, email=email)
            late_days.grant(session=session, course=c, actor=user, role=role, student=student,
                            days=n, reason=reason)
    except DomainError as exc:
        return render_members(request, session, user, course, status_code=exc.status,
                        error=exc.message)
    return RedirectResponse(f"/c/{c.slug}/-/members#late-days", status_code=303)
