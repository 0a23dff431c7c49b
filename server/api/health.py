"""Health, readiness and Prometheus metrics."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import text

from server.deps import SessionDep, SettingsDep
from server.metrics import exposition
from server.security import same_secret
from server.services.records import jobs as job_service
from server.services.records.errors import Forbidden
from server.settings import is_loopback

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def health() -> dict[str, str]:
    """The process is up: answered on the event loop itself, so that a liveness probe does not
    wait behind the worker threads a busy server's routes hold (a probe that waits is a process
    restarted for being busy)."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "database unreachable"}})
def ready(session: SessionDep, response: Response) -> dict[str, str]:
    """The database answers."""
    try:
        session.execute(text("SELECT 1"))
    except Exception as exc:  # any driver error means not ready
        response.status_code = 503
        return {"status": "unavailable", "detail": type(exc).__name__}
    return {"status": "ready"}


@router.get("/metrics", response_class=Response,
            responses={403: {"description": "outside development: the operator's metrics token "
                                            "is needed"}})
def metrics(request: Request, session: SessionDep, settings: SettingsDep,
            authorization: Annotated[str, Header()] = "") -> Response:
    """Prometheus metrics: every server process's, and the queue depth read now. Outside
    development only for the operator's scraper (`PARAGRADE_SERVER_METRICS_TOKEN`): the counts
    (failed logins per route among them) are not for everyone; in development, without a
    token, only for this machine (a development server bound to a host name others reach)."""
    if settings.environment == "development" and settings.metrics_token is None:
        client = request.client.host if request.client else ""
        if not is_loopback(client):
            raise Forbidden("in development /metrics answers this machine only (set "
                            "PARAGRADE_SERVER_METRICS_TOKEN to scrape it from elsewhere)")
    else:
        token = settings.metrics_token
        scheme, _, given = authorization.partition(" ")
        if token is None or scheme != "Bearer" or not same_secret(given.strip(), token):
            raise Forbidden("/metrics needs the operator's metrics token "
                            "(Authorization: Bearer …; PARAGRADE_SERVER_METRICS_TOKEN)")
    depth = job_service.depth(session=session)
    return Response(exposition({q: n["queued"] for q, n in depth.items()},
                               {q: n["claimed"] for q, n in depth.items()}),
                    media_type=CONTENT_TYPE_LATEST)
