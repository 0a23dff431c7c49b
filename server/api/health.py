"""Health, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from server.deps import SessionDep
from server.metrics import QUEUE_DEPTH, REGISTRY
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
    for queue, n in job_service.depth(session=session).items():
        QUEUE_DEPTH.labels(queue=queue).set(n["queued"])
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
