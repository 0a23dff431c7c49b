"""Regrade request pages, for every course: a student's (…/regrade: what they may ask about, the
whole rubric with what their released hand grade applied, their requests and answers) and the
staff's list of the course's requests with an answer form each (/c/COURSE/-/regrades: any
rubric item applied or taken off, or the submission graded again). The same service as the API
(services/by_hand/regrade_requests.py)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError
from sqlalchemy.orm import Session

from server.api import RowId
from server.db import committing
from server.deps import SessionDep
from server.models import User
from server.schemas_regrades import RegradeAnswerIn, RegradeRequestIn
from server.services.by_hand import regrade_requests
from server.services.packages import assignments as assignment_service
from server.services.people import courses as course_service
from server.services.records.errors import DomainError, Forbidden
from server.web.admin import course_for
from server.web.plumbing import Csrf, PageUser, form_number, reasons, render

router = APIRouter(include_in_schema=False)


def _ask_page(request: Request, session: Session, user: User, course: str, slug: str,
              **extra: Any) -> Response:
    c, role = course_service.with_role(session=session, slug=course, user=user)
    if role is None:
        raise Forbidden("you are not enrolled in this course")
    a = assignment_service.get(session=session, course=c, slug=slug)
    if role != "student":
        return RedirectResponse(f"/c/{c.slug}/-/regrades", status_code=303)
    return render(request, "regrade_ask.html", user=user, course=c, a=a,
                  c=regrade_requests.choices(session=session, assignment=a, student=user),
                  subject=regrade_requests.subject, **extra)


@router.get("/c/{course}/{slug}/regrade")
def ask_page(course: str, slug: str, request: Request, session: SessionDep,
             user: PageUser) -> Response:
    return _ask_page(request, session, user, course, slug)


@router.post("/c/{course}/{slug}/regrade", dependencies=[Csrf])
@router.post("/c/{course}/{slug}/feedback/regrade", dependencies=[Csrf])
def ask(course: str, slug: str, request: Request, session: SessionDep, user: PageUser,
        reason: Annotated[str, Form()], about: Annotated[str, Form()]) -> Response:
    """`about`: "item:ID", "test:NAME" or "performance"."""
    c, role = course_service.with_role(session=session, slug=course, user=user)
    if role is None:
        raise Forbidden("you are not enrolled in this course")
    a = assignment_service.get(session=session, course=c, slug=slug)
    kind, _, what = about.partition(":")
    try:
        body = RegradeRequestIn(reason=reason,
                                item_id=form_number(what) if kind == "item" else None,
                                test_name=what if kind == "test" else None,
                                performance=kind == "performance")
        with committing(session):
            regrade_requests.ask(session=session, assignment=a, student=user, role=role,
                                 reason=body.reason, item_id=body.item_id,
                                 test_name=body.test_name, performance=body.performance)
    except ValidationError as exc:
        return _ask_page(request, session, user, course, slug, error=reasons(exc),
                         reason=reason, status_code=422)
    except DomainError as exc:
        return _ask_page(request, session, user, course, slug, error=exc.message,
                         reason=reason, status_code=exc.status)
    return RedirectResponse(f"/c/{c.slug}/{a.slug}/regrade#requests", status_code=303)


def _requests(request: Request, session: Session, user: User, course: str,
              **extra: Any) -> HTMLResponse:
    c, role = course_for(session, user, course, staff=True)
    found = regrade_requests.of_course(session=session, course=c, role=role, status=None)
    items = {x.request.id: regrade_requests.grade_items(session=session, request=x.request)
             for x in found if x.request.status == "open"}
    return render(request, "regrades.html", user=user, course=c, found=found, items=items,
                  **extra)


@router.get("/c/{course}/-/regrades")
def requests_page(course: str, request: Request, session: SessionDep,
                  user: PageUser) -> HTMLResponse:
    return _requests(request, session, user, course)


@router.post("/c/{course}/-/regrades/{request_id}", dependencies=[Csrf])
async def answer(course: str, request_id: RowId, request: Request, session: SessionDep,
                 user: PageUser) -> Response:
    """The form's `answer`; `item-ID` = "apply" or "remove" for any rubric item (or `change`
    for the item asked about); `regrade` = "yes" to grade the submission again."""
    form = await request.form()
    text = str(form.get("answer", ""))
    change = {"apply": True, "remove": False}
    picked = {k.removeprefix("item-"): change[str(v)] for k, v in form.items()
              if k.startswith("item-") and str(v) in change}
    c, role = course_for(session, user, course, staff=True)
    try:
        body = RegradeAnswerIn(
            answer=text, apply_item=change.get(str(form.get("change", ""))),
            apply=[form_number(k) or 0 for k, on in picked.items() if on],
            remove=[form_number(k) or 0 for k, on in picked.items() if not on],
            regrade=form.get("regrade") == "yes")
        with committing(session):
            r = regrade_requests.get(session=session, course=c, request_id=request_id)
            regrade_requests.answer(session=session, request=r, actor=user, role=role,
                                    text=body.answer, items=body.items(),
                                    apply_item=body.apply_item, regrade=body.regrade)
    except ValidationError as exc:
        return _requests(request, session, user, course, error=reasons(exc), status_code=422)
    except DomainError as exc:
        return _requests(request, session, user, course, error=exc.message,
                         status_code=exc.status)
    return RedirectResponse(f"/c/{c.slug}/-/regrades", status_code=303)
