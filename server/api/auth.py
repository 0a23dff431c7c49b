"""Accounts and tokens."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from fastapi import APIRouter, HTTPException, Request, status

from server import security
from server.db import committing
from server.deps import (
    ClientAddress,
    CredentialDep,
    CurrentUser,
    LoginLimitsDep,
    SessionDep,
    SettingsDep,
)
from server.schemas import (
    ErrorPublic,
    SessionPublic,
    TokenCreate,
    TokenPublic,
    UserCreate,
    UserPublic,
)
from server.services.people import users as user_service

router = APIRouter(prefix="/api", tags=["auth"],
                   responses={401: {"model": ErrorPublic}, 422: {"model": ErrorPublic}})


THROTTLED: dict[int | str, dict[str, Any]] = {429: {
    "model": ErrorPublic, "description": "Too many failed logins from this address: wait "
                                         "Retry-After seconds",
    "headers": {"Retry-After": {"schema": {"type": "integer"}}}}}


@contextmanager
def _throttled() -> Iterator[None]:
    """TooManyAttempts as a 429 with its Retry-After header."""
    try:
        yield
    except user_service.TooManyAttempts as exc:
        raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, detail=exc.message,
                            headers={"Retry-After": str(exc.retry_after_s)}) from exc


@router.post("/auth/register", response_model=UserPublic, status_code=status.HTTP_201_CREATED,
             responses={404: {"model": ErrorPublic}, 409: {"model": ErrorPublic}})
def register(body: UserCreate, session: SessionDep) -> object:
    """Create a student account and join the course of the join code."""
    with committing(session):
        return user_service.register(session=session, email=body.email, name=body.name,
                                     password=body.password, join_code=body.join_code,
                                     alias=body.alias)


@router.post("/auth/token", response_model=TokenPublic,
             responses={403: {"model": ErrorPublic}, **THROTTLED})
def login(body: TokenCreate, session: SessionDep, settings: SettingsDep, address: ClientAddress,
          limits: LoginLimitsDep) -> TokenPublic:
    """Exchange email and password for a bearer token (for the CLI; it expires)."""
    with _throttled(), committing(session):
        user = user_service.authenticate(session=session, email=body.email,
                                         password=body.password, address=address, limits=limits)
        return TokenPublic(token=user_service.issue_token(
            session=session, user=user, ttl=timedelta(days=settings.token_ttl_days)))


@router.post("/auth/session", response_model=SessionPublic,
             responses={403: {"model": ErrorPublic}, **THROTTLED})
def browser_login(body: TokenCreate, request: Request, session: SessionDep,
                  settings: SettingsDep, address: ClientAddress,
                  limits: LoginLimitsDep) -> SessionPublic:
    """Log a browser in: a signed HttpOnly cookie, and a CSRF token for its writes."""
    with _throttled(), committing(session):
        user = user_service.authenticate(session=session, email=body.email,
                                         password=body.password, address=address, limits=limits)
        raw = user_service.issue_token(session=session, user=user, name="browser",
                                       ttl=timedelta(days=settings.token_ttl_days))
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
