"""Accounts and tokens."""

from __future__ import annotations

from fastapi import APIRouter, Request, status

from server import security
from server.db import committing
from server.deps import CredentialDep, CurrentUser, SessionDep
from server.schemas import (
    ErrorPublic,
    SessionPublic,
    TokenCreate,
    TokenPublic,
    UserCreate,
    UserPublic,
)
from server.services import courses as course_service
from server.services import users as user_service

router = APIRouter(prefix="/api", tags=["auth"],
                   responses={401: {"model": ErrorPublic}, 422: {"model": ErrorPublic}})


@router.post("/auth/register", response_model=UserPublic, status_code=status.HTTP_201_CREATED,
             responses={404: {"model": ErrorPublic}, 409: {"model": ErrorPublic}})
def register(body: UserCreate, session: SessionDep) -> object:
    """Create a student account and join the course of the join code."""
    with committing(session):
        user = user_service.create(session=session, email=body.email, name=body.name,
                                   password=body.password)
        course_service.join(session=session, user=user, join_code=body.join_code,
                            alias=body.alias)
    return user


@router.post("/auth/token", response_model=TokenPublic, responses={403: {"model": ErrorPublic}})
def login(body: TokenCreate, session: SessionDep) -> TokenPublic:
    """Exchange email and password for a bearer token (for the CLI)."""
    with committing(session):
        user = user_service.authenticate(session=session, email=body.email,
                                         password=body.password)
        return TokenPublic(token=user_service.issue_token(session=session, user=user))


@router.post("/auth/session", response_model=SessionPublic, responses={403: {"model": ErrorPublic}})
def browser_login(body: TokenCreate, request: Request, session: SessionDep) -> SessionPublic:
    """Log a browser in: a signed HttpOnly cookie, and a CSRF token for its writes."""
    with committing(session):
        user = user_service.authenticate(session=session, email=body.email,
                                         password=body.password)
        raw = user_service.issue_token(session=session, user=user, name="browser")
    csrf = security.new_token()
    request.session.update(token=raw, csrf=csrf)
    return SessionPublic(csrf_token=csrf, user=UserPublic.model_validate(user))


@router.delete("/auth/session", status_code=status.HTTP_204_NO_CONTENT)
def browser_logout(request: Request, session: SessionDep, user: CurrentUser,
                   token: CredentialDep) -> None:
    """End the browser session (its token is revoked)."""
    with committing(session):
        user_service.revoke_token(session=session, raw=token)
    request.session.clear()


@router.delete("/auth/token", status_code=status.HTTP_204_NO_CONTENT)
def logout(session: SessionDep, user: CurrentUser, token: CredentialDep) -> None:
    """Revoke the token used for this request."""
    with committing(session):
        user_service.revoke_token(session=session, raw=token)


@router.get("/me", response_model=UserPublic)
def me(user: CurrentUser) -> object:
    return user
