"""The FastAPI application."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from sqlalchemy import Engine
from starlette.middleware.sessions import SessionMiddleware

from server.api import auth, courses, exports, fleet, health, runner, submissions
from server.dispatch import publishing_sessions
from server.metrics import REQUESTS
from server.schemas import ErrorPublic
from server.services.assignments import PackageInvalid
from server.services.errors import DomainError
from server.settings import ServerSettings, get_settings
from server.web import admin, pages


def create_app(settings: ServerSettings | None = None, engine: Engine | None = None) -> FastAPI:
    """An app over `settings` (and an engine, for tests); the schema must be migrated."""
    settings = settings or get_settings()
    app = FastAPI(title="paragrade", version="0.1.0",
                  description="Autograding for parallel programming with trustworthy speedups.")
    app.state.settings = settings
    app.state.sessions, app.state.dispatcher = publishing_sessions(settings, engine)
    # Browser sessions: a signed, HttpOnly, SameSite=Lax cookie (Secure outside development).
    app.add_middleware(SessionMiddleware, secret_key=settings.secret_key,
                       session_cookie="paragrade_session", same_site="lax",
                       https_only=settings.environment == "production", max_age=14 * 86400)
    for module in (auth, courses, submissions, exports, fleet, runner, health):
        for route in module.router.routes:
            # FastAPI answers 400 itself to a body it cannot parse at all (not UTF-8, broken multipart).
            if isinstance(route, APIRoute) and route.body_field is not None:
                route.responses.setdefault(400, {"model": ErrorPublic,
                                                 "description": "The body could not be parsed"})
        app.include_router(module.router)

    app.include_router(pages.router)
    app.include_router(admin.router)
    app.mount("/static", StaticFiles(directory=pages.HERE / "static"), name="static")
    app.add_exception_handler(pages.LoginRequired, pages.login_redirect)  # type: ignore[arg-type]

    @app.exception_handler(DomainError)
    def _domain(request: Request, exc: DomainError) -> Response:
        if not request.url.path.startswith("/api/"):
            return pages.error_page(request, exc)
        body: dict[str, object] = {"detail": exc.message}
        if isinstance(exc, PackageInvalid):
            body["problems"] = exc.problems
        return JSONResponse(body, status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": pages.reasons(exc) or "invalid request"}, status_code=422)

    @app.middleware("http")
    async def _count(request: Request, call_next):  # type: ignore[no-untyped-def]
        response = await call_next(request)
        route = request.scope.get("route")
        REQUESTS.labels(request.method, getattr(route, "path", "unmatched"),
                        str(response.status_code)).inc()
        return response

    return app
