"""Health, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST
from sqlalchemy import text

from server.deps import SessionDep
from server.metrics import exposition
from server.services import jobs as job_service

router = APIRouter(tags=["health"])


@router.get("/healthz")
def health() -> dict[str, str]:
    """The process is up."""
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


@router.get("/metrics", response_class=Response)
def metrics(session: SessionDep) -> Response:
    """Prometheus metrics: every server process's, and the queue depth read now."""
    depth = {queue: n["queued"] for queue, n in job_service.depth(session=session).items()}
    return Response(exposition(depth), media_type=CONTENT_TYPE_LATEST)
