"""Accounts and tokens."""

from __future__ import annotations

from fastapi import APIRouter, status

from server.db import committing
from server.deps import BearerDep, CurrentUser, SessionDep
from server.schemas import ErrorPublic, TokenCreate, TokenPublic, UserCreate, UserPublic
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


@router.delete("/auth/token", status_code=status.HTTP_204_NO_CONTENT)
def logout(session: SessionDep, user: CurrentUser, token: BearerDep) -> None:
    """Revoke the token used for this request."""
    with committing(session):
        user_service.revoke_token(session=session, raw=token)


@router.get("/me", response_model=UserPublic)
def me(user: CurrentUser) -> object:
    return user
