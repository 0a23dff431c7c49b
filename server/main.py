"""The FastAPI application."""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import re
import signal

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError
from starlette.middleware.sessions import SessionMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from server.api import (
    auth,
    courses,
    exports,
    finals,
    fleet,
    health,
    late_days,
    lti,
    manual,
    members,
    notices,
    practice,
    regrades,
    reviews,
    runner,
    similarity,
    statistics,
    submissions,
    teams,
)
from server.boundary import ControlCharacters
from server.dispatch import publishing_sessions
from server.metrics import REQUESTS
from server.schemas import ErrorPublic
from server.services.grades import leaderboard
from server.services.packages.assignments import PackageInvalid
from server.services.people import courses as course_service
from server.services.records.errors import DomainError
from server.settings import ServerSettings, get_settings, with_local_secrets
from server.web import admin, live, pages, plumbing, stats
from server.web import by_hand as by_hand_pages
from server.web import late_days as late_day_pages
from server.web import manage as manage_pages
from server.web import notices as notice_pages
from server.web import practice as practice_pages
from server.web import regrades as regrade_pages
from server.web import reviews as reviews_pages
from server.web import teams as team_pages

# Pages load only our own /static script and stylesheet; the favicon is an empty data: URL and
# plots are inline SVG (presentation attributes, no style attributes).
CSP = ("default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
       "form-action 'self'; frame-ancestors 'none'")
# FastAPI's /docs and /redoc pages load Swagger UI / ReDoc from a CDN and start them inline.
DOCS_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net; "
            "style-src 'self' 'unsafe-inline' https://cdn.jsdelivr.net https://fonts.googleapis.com; "
            "font-src 'self' https://fonts.gstatic.com; img-src 'self' data: https:; "
            "worker-src 'self' blob:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")
DOCS_PATHS = ("/docs", "/redoc")

log = logging.getLogger(__name__)


def security_headers(path: str) -> dict[str, str]:
    """Headers every response carries: no framing, no type sniffing, scripts only from us."""
    return {"Content-Security-Policy": DOCS_CSP if path.startswith(DOCS_PATHS) else CSP,
            "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "same-origin"}


class CountAndSecure:
    """Counts every answer by route and status (Prometheus) and adds the security headers; plain
    ASGI (a BaseHTTPMiddleware costs every request a task and a copy of its body stream)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        extra = [(k.lower().encode(), v.encode())
                 for k, v in security_headers(scope["path"]).items()]

        def count(status: int) -> None:
            route = getattr(scope.get("route"), "path", "unmatched")
            REQUESTS.labels(scope["method"], route, str(status)).inc()

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                count(message["status"])
                headers = list(message.get("headers", []))
                have = {k.lower() for k, _ in headers}
                headers += [(k, v) for k, v in extra if k not in have]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            count(500)  # the crash answer is sent further out (ServerErrorMiddleware)
            raise


JSON_BODY_BYTES = 1 << 20
"""Every body but an upload's: forms, JSON (the largest, a course's settings, is a few KiB)."""
RUNNER_BODY_BYTES = 16 << 20
"""A runner's result: a grade report with its output excerpts, a similarity run's pairs."""


def body_limits(settings: ServerSettings) -> list[tuple[re.Pattern[str], int]]:
    """The largest body each kind of route takes, read before anyone is authenticated: an
    upload route twice its own limit (multipart framing, several files) plus 1 MiB, runner
    routes `RUNNER_BODY_BYTES`, every other route `JSON_BODY_BYTES`."""
    def upload(limit: int) -> int:
        return 2 * limit + (1 << 20)

    return [(re.compile(r"^/api/runner/"), RUNNER_BODY_BYTES),
            (re.compile(r"/(submissions|submit)$"), upload(settings.max_upload_bytes)),
            (re.compile(r"/roster$"), upload(course_service.MAX_ROSTER_BYTES)),
            (re.compile(r"/(assignments/upload|import)$"), upload(settings.max_package_bytes)),
            (re.compile(r""), JSON_BODY_BYTES)]


class BodyLimit:
    """Refuses a body larger than its route's kind takes (413) before the route, its
    authentication or its parser reads it: by Content-Length when sent, else as it streams in."""

    def __init__(self, app: ASGIApp, limits: list[tuple[re.Pattern[str], int]]) -> None:
        self.app, self.limits = app, limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = next(n for pattern, n in self.limits if pattern.search(scope["path"]))
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await _too_large(scope, send, limit)
            return
        seen = 0

        async def counting() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _BodyTooLarge(limit)
            return message

        try:
            await self.app(scope, counting, send)
        except _BodyTooLarge:
            await _too_large(scope, send, limit)


class _BodyTooLarge(HTTPException):
    """An HTTPException, so that the body parsers let it through (they turn any other failure
    into a 400) and it is answered as a 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is larger than this route takes ({limit} bytes)")


async def _too_large(scope: Scope, send: Send, limit: int) -> None:
    response = JSONResponse({"detail": f"the request body is larger than this route takes "
                                       f"({limit} bytes)"}, status_code=413,
                            headers={"Connection": "close"})
    await response(scope, _nothing, send)


async def _nothing() -> Message:
    return {"type": "http.disconnect"}


def create_app(settings: ServerSettings | None = None, engine: Engine | None = None) -> FastAPI:
    """An app over `settings` (and an engine, for tests); the schema must be migrated."""
    settings = settings or get_settings()
    app = FastAPI(title="paragrade", version="0.1.0",
                  description="Autograding for parallel programming with trustworthy speedups.")
    app.state.settings = settings
    app.state.polls = live.SharedPolls()  # the live pages' polls, shared by their watchers
    app.state.boards = leaderboard.BoardCache()  # each leaderboard, computed once per change
    # LTI launches' own threads (made as launches need them), so a slow LMS never holds others'.
    app.state.lti_launches = lti.Launches(settings.lti_launch_slots, settings.lti_launch_queue)
    app.state.sessions, app.state.dispatcher = publishing_sessions(settings, engine)
    # Browser sessions: a signed, HttpOnly, SameSite=Lax cookie (Secure outside development).
    app.add_middleware(SessionMiddleware, secret_key=settings.secret_key,
                       session_cookie="paragrade_session", same_site="lax",
                       https_only=settings.environment == "production", max_age=14 * 86400)
    for module in (auth, courses, members, similarity, submissions, reviews, exports, fleet,
                   runner, health, lti, statistics, finals, regrades, manual, practice, teams,
                   notices, late_days):
        for route in module.router.routes:
            # FastAPI answers 400 itself to a body it cannot parse at all (not UTF-8, broken multipart).
            if isinstance(route, APIRoute) and route.body_field is not None:
                route.responses.setdefault(400, {"model": ErrorPublic,
                                                 "description": "The body could not be parsed"})
        app.include_router(module.router)

    app.include_router(pages.router)
    app.include_router(admin.router)
    app.include_router(reviews_pages.router)
    app.include_router(regrade_pages.router)
    app.include_router(notice_pages.router)
    app.include_router(late_day_pages.router)
    app.include_router(by_hand_pages.router)
    app.include_router(stats.router)
    app.include_router(practice_pages.router)
    app.include_router(team_pages.router)
    app.include_router(manage_pages.router)
    app.mount("/static", StaticFiles(directory=plumbing.HERE / "static"), name="static")
    app.state.guide = (settings.guide_dir / "index.html").is_file()
    if app.state.guide:  # the guide is static pages, served as they were built
        app.mount("/guide", StaticFiles(directory=settings.guide_dir, html=True), name="guide")
    app.add_exception_handler(plumbing.LoginRequired, plumbing.login_redirect)  # type: ignore[arg-type]

    @app.exception_handler(DomainError)
    def _domain(request: Request, exc: DomainError) -> Response:
        if not request.url.path.startswith("/api/"):
            return plumbing.error_page(request, exc)
        body: dict[str, object] = {"detail": exc.message}
        if isinstance(exc, PackageInvalid):
            body["problems"] = exc.problems
        return JSONResponse(body, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": plumbing.reasons(exc) or "invalid request"}, status_code=422)

    @app.exception_handler(OperationalError)
    def _database_away(request: Request, exc: OperationalError) -> Response:
        # The database restarting, unreachable or busy: a moment's outage, not a failure of the
        # request; the connection pool reconnects by itself (pool_pre_ping).
        log.warning("the database did not answer: %s", str(exc).splitlines()[0][:300])
        return JSONResponse({"detail": "the database is not answering; nothing was changed. "
                                       "Try again in a few seconds"}, status_code=503,
                            headers={**security_headers(request.url.path), "Retry-After": "5"})

    @app.exception_handler(Exception)
    def _crash(request: Request, exc: Exception) -> Response:
        # Starlette still logs the traceback and re-raises after this answer; the body says
        # nothing about the failure, the headers are those of every other response.
        return JSONResponse({"detail": "internal error: the server failed; it was logged"},
                            status_code=500, headers=security_headers(request.url.path))

    app.add_middleware(ControlCharacters)  # inside BodyLimit: what it reads is bounded
    app.add_middleware(BodyLimit, limits=body_limits(settings))
    app.add_middleware(CountAndSecure)
    if settings.trusted_proxies:
        # Only the operator's own proxies may say who the client is: anyone else could name a
        # new address with every guess and never meet the login throttle. `serve` starts
        # uvicorn without its own proxy handling, which trusts 127.0.0.1: every local user.
        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=settings.trusted_proxies)
    return app


def served_app() -> FastAPI:
    """The app of one process of `paragrade serve --workers N` (uvicorn imports it by name in
    each process it starts): this installation's settings and secrets, as the parent checked."""
    _end_with_supervisor()
    return create_app(with_local_secrets(get_settings()))


def _end_with_supervisor() -> None:
    """A server process that uvicorn's supervisor started gets SIGTERM when the supervisor ends,
    even killed with SIGKILL: left alone it would keep the port, and a new `serve` could not
    listen on it."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    pr_set_pdeathsig = 1  # <linux/prctl.h>
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != parent.pid:  # it ended before the prctl
        os.kill(os.getpid(), signal.SIGTERM)
