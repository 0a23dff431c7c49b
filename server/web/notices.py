"""Notification pages: the bell on every page (how many are unread), the list (opening one marks
it read), what a user is told by e-mail, and a course's announcements (the staff post them from
the home page's course card). The same services as the API (services/notices/)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError
from sqlalchemy.orm import Session

from server.api import RowId
from server.db import committing
from server.deps import SessionDep, SettingsDep
from server.models import User
from server.schemas_notices import AnnouncementIn
from server.services.notices import announcements, notify
from server.services.notices.kinds import EMAILS, KINDS
from server.services.packages import assignments as assignment_service
from server.services.people import courses as course_service
from server.services.records.errors import DomainError, Forbidden
from server.web.pages import home_page
from server.web.plumbing import Csrf, PageUser, form_number, reasons, render, templates

router = APIRouter(include_in_schema=False)


def _unread(request: Request, user: User | None) -> int:
    """The bell's count (a page's one extra query)."""
    if user is None:
        return 0
    with request.app.state.sessions() as session:
        return notify.unread(session=session, user=user)


templates.env.globals["unread_notices"] = _unread


def _page(request: Request, session: Session, settings: Any, user: User,
          **extra: Any) -> HTMLResponse:
    return render(request, "notifications.html", user=user,
                  notes=notify.latest(session=session, user=user),
                  kinds=[(k, about, notify.email_of(session=session, user_id=user.id, kind=k))
                         for k, (about, _) in KINDS.items()], emails=EMAILS,
                  grade_wait=notify.grade_wait_s(session=session, user_id=user.id),
                  email_configured=settings.smtp_host is not None, **extra)


@router.get("/notifications")
def notifications(request: Request, session: SessionDep, settings: SettingsDep,
                  user: PageUser) -> HTMLResponse:
    return _page(request, session, settings, user)


@router.get("/n/{notification_id}")
def open_one(notification_id: RowId, session: SessionDep, user: PageUser) -> Response:
    """Mark it read and go to what it is about (a path of this server only)."""
    mine = {n.id: n for n in notify.latest(session=session, user=user)}
    with committing(session):
        notify.mark_read(session=session, user=user, notification_id=notification_id)
    n = mine.get(notification_id)
    link = n.link if n is not None and n.link.startswith("/") and not n.link.startswith("//") \
        else "/notifications"
    return RedirectResponse(link, status_code=303)


@router.post("/notifications/read", dependencies=[Csrf])
def read_all(session: SessionDep, user: PageUser) -> Response:
    with committing(session):
        notify.mark_read(session=session, user=user)
    return RedirectResponse("/notifications", status_code=303)


@router.post("/notifications/settings", dependencies=[Csrf])
async def choose(request: Request, session: SessionDep, settings: SettingsDep,
                 user: PageUser) -> Response:
    """Each kind's `email-KIND` (off, now, digest) and `grade_wait_s`."""
    form = await request.form()
    wait = str(form.get("grade_wait_s", "")).strip()
    try:
        with committing(session):
            notify.choose(session=session, user=user,
                          emails={k.removeprefix("email-"): str(v) for k, v in form.items()
                                  if k.startswith("email-")},
                          grade_wait=0 if wait == "0" else form_number(wait, high=86400)
                          if wait else None)
    except DomainError as exc:
        return _page(request, session, settings, user, error=exc.message,
                     status_code=exc.status)
    return RedirectResponse("/notifications?saved=1#settings", status_code=303)


@router.post("/c/{course}/-/announcements", dependencies=[Csrf])
def announce(course: str, request: Request, session: SessionDep, settings: SettingsDep,
             user: PageUser, title: Annotated[str, Form()], body: Annotated[str, Form()] = "",
             assignment: Annotated[str, Form()] = "") -> Response:
    c, role = course_service.with_role(session=session, slug=course, user=user)
    if not course_service.is_staff(role):
        raise Forbidden("only the course's instructors and TAs post announcements")
    try:
        data = AnnouncementIn(title=title, body=body, assignment=assignment or None)
        with committing(session):
            a = (assignment_service.get(session=session, course=c, slug=data.assignment)
                 if data.assignment else None)
            announcements.post(session=session, course=c, actor=user, role=role,
                               title=data.title, body=data.body, assignment=a)
    except ValidationError as exc:
        return home_page(request, session, settings, user, status_code=422, error=reasons(exc))
    except DomainError as exc:
        return home_page(request, session, settings, user, status_code=exc.status,
                         error=exc.message)
    return RedirectResponse(f"/#announcements-{c.slug}", status_code=303)
