"""Dependencies as Annotated aliases: sessions, settings, the current user, roles.

One that does no I/O is `async def`: FastAPI runs it on the event loop, where a plain `def` is
handed to the threadpool and back (two thread switches). One that reads the database stays `def`:
on the loop it would stall every other request."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlalchemy.orm import Session

from server import security
from server.dispatch import Dispatcher
from server.models import Course, User
from server.services.fleet import runner_credentials
from server.services.fleet.runner_credentials import RunnerIdentity
from server.services.people import courses as course_service
from server.services.people import users as user_service
from server.services.records.errors import DomainError, Forbidden
from server.settings import ServerSettings


class Unauthorized(DomainError):
    status = 401


def _session(request: Request) -> Iterator[Session]:
    with request.app.state.sessions() as session:
        yield session


async def _settings(request: Request) -> ServerSettings:
    settings: ServerSettings = request.app.state.settings
    return settings


async def _dispatcher(request: Request) -> Dispatcher:
    dispatcher: Dispatcher = request.app.state.dispatcher
    return dispatcher


SessionDep = Annotated[Session, Depends(_session)]
SettingsDep = Annotated[ServerSettings, Depends(_settings)]
DispatcherDep = Annotated[Dispatcher, Depends(_dispatcher)]


async def _client_address(request: Request) -> str:
    # The peer uvicorn saw; behind a reverse proxy, uvicorn's --proxy-headers (trusting only the
    # proxy's address, --forwarded-allow-ips) makes it the real client's.
    return request.client.host if request.client else "unknown"


ClientAddress = Annotated[str, Depends(_client_address)]


async def _login_limits(settings: SettingsDep) -> user_service.LoginLimits:
    return user_service.LoginLimits.of(settings)


LoginLimitsDep = Annotated[user_service.LoginLimits, Depends(_login_limits)]


async def _bearer(authorization: Annotated[str | None, Header()] = None) -> str:
    if not authorization or not authorization.lower().startswith("bearer "):
        raise Unauthorized("log in first (Authorization: Bearer TOKEN)")
    return authorization.split(" ", 1)[1].strip()


BearerDep = Annotated[str, Depends(_bearer)]


SAFE_METHODS = {"GET", "HEAD", "OPTIONS"}


async def _credential(request: Request,
                      authorization: Annotated[str | None, Header()] = None) -> str:
    """A bearer token (CLI) or the browser session's token; cookie writes need the CSRF token."""
    if authorization and authorization.lower().startswith("bearer "):
        return authorization.split(" ", 1)[1].strip()
    token = request.session.get("token") if "session" in request.scope else None
    if not token:
        raise Unauthorized("log in first (Authorization: Bearer TOKEN, or a browser session)")
    if request.method not in SAFE_METHODS:
        sent = request.headers.get("X-CSRF-Token", "")
        expected = str(request.session.get("csrf", ""))
        if not expected or not security.same_secret(sent, expected):
            raise Forbidden("missing or wrong CSRF token (send X-CSRF-Token)")
    return str(token)


CredentialDep = Annotated[str, Depends(_credential)]


def _current_user(session: SessionDep, token: CredentialDep) -> User:
    user = user_service.user_for_token(session=session, raw=token)
    if user is None:
        raise Unauthorized("the token is invalid or revoked; log in again")
    return user


CurrentUser = Annotated[User, Depends(_current_user)]


async def _instructor(user: CurrentUser) -> User:
    if not user.is_instructor:
        raise Forbidden("instructors only")
    return user


InstructorUser = Annotated[User, Depends(_instructor)]


class CourseAccess:
    """A course and the current user's role in it (404 when not enrolled)."""

    def __init__(self, course: Course, role: str, user: User) -> None:
        self.course, self.role, self.user = course, role, user


def _course_access(course: str, session: SessionDep, user: CurrentUser) -> CourseAccess:
    c, role = course_service.with_role(session=session, slug=course, user=user)
    if role is None:
        raise Forbidden("you are not enrolled in this course")
    return CourseAccess(c, role, user)


CourseDep = Annotated[CourseAccess, Depends(_course_access)]


async def _course_instructor(access: CourseDep) -> CourseAccess:
    if access.role != "instructor":
        raise Forbidden("only the course's instructors may do this")
    return access


CourseInstructorDep = Annotated[CourseAccess, Depends(_course_instructor)]


async def _course_staff(access: CourseDep) -> CourseAccess:
    if not course_service.is_staff(access.role):
        raise Forbidden("only the course's instructors and TAs may do this")
    return access


CourseStaffDep = Annotated[CourseAccess, Depends(_course_staff)]


async def _runner_bearer(authorization: Annotated[str | None, Header()] = None) -> str:
    if not authorization or not authorization.lower().startswith("bearer "):
        raise Unauthorized("a runner presents its credential (Authorization: Bearer SECRET)")
    return authorization.split(" ", 1)[1].strip()


def _runner(session: SessionDep, settings: SettingsDep,
            token: Annotated[str, Depends(_runner_bearer)]) -> RunnerIdentity:
    return runner_credentials.identify(session=session, token=token,
                                   fleet_token=settings.runner_token)


# The runner a request comes from: its own credential's (name and queues) or the fleet token's.
RunnerDep = Annotated[RunnerIdentity, Depends(_runner)]
# A runner process's own key, made at its start and sent with every claim and job request: the
# claim binds the job to it, so only the process that claimed a job can fetch, renew or report it.
RunnerKey = Annotated[str, Header(alias="X-Runner-Key", min_length=16, max_length=200,
                                  description="The runner process's own key (random, made at "
                                              "its start); a job answers only its claimer's")]
