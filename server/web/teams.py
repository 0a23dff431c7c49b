"""A student's team on the assignment page: create one, join by code, leave
(services/people/teams.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from server.db import committing
from server.deps import SessionDep, SettingsDep
from server.models import Assignment
from server.services.people import teams as team_service
from server.services.records.errors import DomainError
from server.web.pages import page_assignment, render_assignment
from server.web.plumbing import Csrf, PageUser

router = APIRouter(include_in_schema=False)


def _act(request: Request, session: SessionDep, settings: SettingsDep, user: PageUser,
         course: str, slug: str, action: Callable[[str | None, Assignment], object]) -> Response:
    """One team change in one transaction: back to the team's card, or the refusal there."""
    _, role, a = page_assignment(session, user, course, slug)
    try:
        with committing(session):
            action(role, a)
    except DomainError as exc:
        return render_assignment(request, session, settings, user, course, slug,
                                 error=exc.message, status_code=exc.status)
    return RedirectResponse(f"/c/{course}/{slug}#team", status_code=303)


@router.post("/c/{course}/{slug}/team", dependencies=[Csrf])
def create(course: str, slug: str, request: Request, session: SessionDep, settings: SettingsDep,
           user: PageUser, name: Annotated[str, Form(max_length=200)] = "") -> Response:
    return _act(request, session, settings, user, course, slug, lambda role, a: team_service.create(
        session=session, user=user, assignment=a, role=role, name=name))


@router.post("/c/{course}/{slug}/team/join", dependencies=[Csrf])
def join(course: str, slug: str, request: Request, session: SessionDep, settings: SettingsDep,
         user: PageUser, code: Annotated[str, Form(max_length=200)] = "") -> Response:
    return _act(request, session, settings, user, course, slug, lambda role, a: team_service.join(
        session=session, user=user, assignment=a, role=role, code=code))


@router.post("/c/{course}/{slug}/team/leave", dependencies=[Csrf])
def leave(course: str, slug: str, request: Request, session: SessionDep, settings: SettingsDep,
          user: PageUser) -> Response:
    return _act(request, session, settings, user, course, slug, lambda role, a: team_service.leave(
        session=session, user=user, assignment=a, role=role))
