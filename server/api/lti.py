"""LTI 1.3: the tool's endpoints an LMS calls (OIDC login, launch, JWKS) and the registration of
an LMS for a course (its instructors), with the grades owed to its gradebook."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated

from fastapi import APIRouter, Form, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from server.db import committing
from server.deps import (
    ClientAddress,
    CourseInstructorDep,
    CourseStaffDep,
    LoginLimitsDep,
    SessionDep,
    SettingsDep,
)
from server.models import LtiPlatform
from server.schemas import ErrorPublic
from server.schemas_lti import LtiGradePostPublic, LtiPlatformCreate, LtiPlatformPublic
from server.services.lti import launch as lti_launch
from server.services.lti import linking as lti_linking
from server.services.lti import passback as lti_passback
from server.services.lti import platforms as lti_platforms
from server.services.packages import assignments as assignment_service
from server.services.people import users as user_service
from server.services.records.errors import DomainError
from server.settings import ServerSettings
from server.web.plumbing import Csrf, PageUser, render, safe_next, start_session

router = APIRouter(tags=["lti"], responses={401: {"model": ErrorPublic},
                                            403: {"model": ErrorPublic},
                                            404: {"model": ErrorPublic},
                                            422: {"model": ErrorPublic}})


def _base(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def _platform_public(request: Request, p: LtiPlatform) -> LtiPlatformPublic:
    base = _base(request)
    return LtiPlatformPublic(id=p.id, issuer=p.issuer, client_id=p.client_id,
                             deployment_ids=p.deployment_ids,
                             allow_private_network=p.allow_private_network,
                             login_url=f"{base}/lti/login",
                             launch_url=f"{base}/lti/launch", jwks_url=f"{base}/lti/jwks",
                             public_key=lti_platforms.public_pem(p))


@router.post("/api/courses/{course}/lti/platforms", response_model=LtiPlatformPublic,
             status_code=status.HTTP_201_CREATED, responses={409: {"model": ErrorPublic}})
def register(body: LtiPlatformCreate, access: CourseInstructorDep, session: SessionDep,
             request: Request, settings: SettingsDep) -> LtiPlatformPublic:
    """Register an LMS (LTI 1.3 platform) for this course; the answer is what to enter in the
    LMS's tool registration."""
    with committing(session):
        p = lti_platforms.register(session=session, actor=access.user, course=access.course,
                                   role=access.role, **body.model_dump(),
                                   development=settings.environment == "development")
        return _platform_public(request, p)


@router.get("/api/courses/{course}/lti/platforms", response_model=list[LtiPlatformPublic])
def platforms(access: CourseInstructorDep, session: SessionDep,
              request: Request) -> list[LtiPlatformPublic]:
    return [_platform_public(request, p)
            for p in lti_platforms.platforms(session=session, course=access.course)]


@router.get("/api/courses/{course}/lti/grades", response_model=list[LtiGradePostPublic])
def grade_posts(access: CourseStaffDep, session: SessionDep) -> list[LtiGradePostPublic]:
    """Every grade owed to an LMS gradebook and whether it got there (failed posts are
    retried until the LMS takes them)."""
    return [LtiGradePostPublic(student=p.user.email, assignment=p.assignment.slug, score=p.score,
                               max_score=p.max_score, state=p.state, attempts=p.attempts,
                               last_error=p.last_error, sent_at=p.sent_at,
                               next_try=p.next_at if p.state == "pending" else None)
            for p in lti_passback.posts(session=session, course=access.course)]


@router.get("/lti/jwks")
def jwks(session: SessionDep) -> dict[str, list[dict[str, object]]]:
    """The tool's public keys (an LMS checks the tool's signed requests with them)."""
    return lti_platforms.jwks(session=session)


async def _params(request: Request) -> dict[str, str]:
    params = dict(request.query_params)
    if request.method == "POST":
        form = await request.form()
        params |= {k: v for k, v in form.items() if isinstance(v, str)}
    return params


@router.api_route("/lti/login", methods=["GET", "POST"], include_in_schema=False)
async def login(request: Request, settings: SettingsDep) -> Response:
    """OIDC login initiation (the LMS sends the browser here first)."""
    params = await _params(request)

    def run() -> Response:
        sessions = request.app.state.sessions
        with sessions() as session:
            return lti_launch.login(session=session, sessions=sessions, settings=settings,
                                    params=params, cookies=dict(request.cookies),
                                    secure=request.url.scheme == "https",
                                    launch_url=f"{_base(request)}/lti/launch")

    return await run_in_threadpool(run)


class Launches:
    """Launches' own worker threads: a launch may wait seconds on an LMS (its key set), so
    launches never take the threads the rest of the server answers from (AnyIO's default
    limiter, which every sync route shares). `slots` run at once, `queue` more wait; beyond that
    a launch is answered 503 with Retry-After at once. A plain thread pool, not an AnyIO
    limiter: it serves whichever event loop asks (the tests' clients each run their own)."""

    def __init__(self, slots: int, queue: int) -> None:
        self.pool = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="lti-launch")
        self.most = slots + queue
        self._lock = threading.Lock()
        self.in_flight = 0

    def admit(self) -> bool:
        with self._lock:
            if self.in_flight >= self.most:
                return False
            self.in_flight += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self.in_flight -= 1


@router.post("/lti/launch", include_in_schema=False)
async def launch(request: Request, settings: SettingsDep) -> Response:
    """The LMS's launch: the account linked to the LMS identity is logged in here and lands
    on the assignment (or the course) the link names."""
    launches: Launches = request.app.state.lti_launches  # made with the app (server/main.py)
    if not launches.admit():
        return HTMLResponse("<p>Too many launches from LMSs at once: try again in a few "
                            "seconds.</p>", status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
                            headers={"Retry-After": str(LAUNCH_RETRY_AFTER_S)})
    try:
        return await _launch(request, settings, launches.pool)
    finally:
        launches.leave()


LAUNCH_RETRY_AFTER_S = 5


async def _launch(request: Request, settings: ServerSettings,
                  pool: ThreadPoolExecutor) -> Response:
    params = await _params(request)

    # The launch queries the database and may fetch the LMS's key set: in a worker thread, so
    # a slow LMS (or one that points back at this server) holds this launch, not the server.
    def run() -> Response:
        sessions = request.app.state.sessions
        with sessions() as session, committing(session):
            arrival = lti_launch.launch(session=session, sessions=sessions, settings=settings,
                                        params=params, cookies=dict(request.cookies),
                                        secure=request.url.scheme == "https")
            start_session(request, session, settings, arrival.user)
            if arrival.deep_link is not None:  # an instructor places assignments in the LMS
                items = assignment_service.offered(session=session, course=arrival.course)
                return render(request, "lti_deep_link.html", user=arrival.user,
                              course=arrival.course, assignments=items,
                              launch_id=arrival.deep_link)
            target = f"/c/{arrival.course.slug}/{arrival.assignment.slug}" \
                if arrival.assignment else "/"
        return RedirectResponse(target, status_code=status.HTTP_303_SEE_OTHER)

    return await asyncio.get_running_loop().run_in_executor(pool, run)


@router.post("/lti/deep-link", include_in_schema=False, dependencies=[Csrf])
def deep_link(request: Request, session: SessionDep, user: PageUser, settings: SettingsDep,
              launch_id: Annotated[str, Form(max_length=200)],
              slugs: Annotated[list[str], Form(default_factory=list)]) -> Response:
    """Hand the chosen assignments back to the LMS (a signed deep linking response)."""
    html = lti_launch.deep_link_response(
        session=session, sessions=request.app.state.sessions, settings=settings,
        launch_id=launch_id,
        cookies=dict(request.cookies), secure=request.url.scheme == "https", user=user,
        slugs=slugs, base=_base(request))
    return HTMLResponse(html)


@router.get("/lti/link", include_in_schema=False)
def link_form(request: Request, user: PageUser, session: SessionDep, next: str = "/"
              ) -> Response:
    """For an account an LMS made: log in to your own account to link the LMS to it."""
    if not lti_linking.lms_only(user):
        return RedirectResponse(safe_next(next), status_code=status.HTTP_303_SEE_OTHER)
    return render(request, "lti_link.html", user=user, next=safe_next(next),
                  lmss=lti_linking.made_by(session=session, user=user))


@router.post("/lti/link", include_in_schema=False, dependencies=[Csrf])
def link(request: Request, session: SessionDep, settings: SettingsDep, user: PageUser,
         address: ClientAddress, limits: LoginLimitsDep, email: Annotated[str, Form()],
         password: Annotated[str, Form()], next: Annotated[str, Form()] = "/") -> Response:
    """The LMS identity of the signed-in (LMS-made) account moves to the account these
    credentials open, which this browser is then signed in to (server/services/lti/linking.py)."""
    try:
        with committing(session):
            owner = lti_linking.link(session=session, lms_user=user, email=email,
                                     password=password, address=address, limits=limits)
            start_session(request, session, settings, owner)
    except DomainError as exc:
        page = render(request, "lti_link.html", status_code=exc.status, error=exc.message,
                      user=user, next=safe_next(next), email=email,
                      lmss=lti_linking.made_by(session=session, user=user))
        if isinstance(exc, user_service.TooManyAttempts):
            page.headers["Retry-After"] = str(exc.retry_after_s)
        return page
    return RedirectResponse(safe_next(next), status_code=status.HTTP_303_SEE_OTHER)
