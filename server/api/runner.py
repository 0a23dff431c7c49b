"""The runner side: claim a job, fetch its bundle and archive, post its outcome."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Response, status

from runners.protocol import JobOffer, JobOutcome
from server.api import RowId
from server.deps import RunnerDep, SessionDep, SettingsDep
from server.models import AssignmentVersion, Submission
from server.schemas import ErrorPublic
from server.services import artifacts
from server.services import jobs as job_service
from server.services.errors import NotFound

router = APIRouter(prefix="/api/runner", tags=["runner"],
                   responses={401: {"model": ErrorPublic}, 403: {"model": ErrorPublic},
                              404: {"model": ErrorPublic}, 422: {"model": ErrorPublic}})
NO_NUL = r"^[^\x00]*$"  # PostgreSQL text cannot hold NUL
JobToken = Annotated[str, Header(alias="X-Job-Token", description="The job's own secret")]


@router.post("/claim", response_model=JobOffer | None,
             responses={204: {"description": "nothing to do"}})
def claim(_: RunnerDep, session: SessionDep,
          runner: Annotated[str, Query(pattern=NO_NUL)] = "runner",
          queues: Annotated[str, Query(pattern=NO_NUL)] = "cpu,mpi") -> object:
    """The oldest queued job of these queues (comma-separated), or 204."""
    offer = job_service.claim(session=session, runner=runner[:200],
                              queues=[q for q in queues.split(",") if q])
    if offer is None:
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    return offer


def _artifact(session: SessionDep, settings: SettingsDep, job_id: int, token: str,
              which: str) -> Response:
    job = job_service.authorize(session=session, job_id=job_id, token=token)
    if job.kind == "validate":
        version = session.get(AssignmentVersion, job.version_id)
        if version is None or which != "bundle":
            raise NotFound("a validation job has only a bundle")
        sha = version.bundle_sha256
    else:
        sub = session.get(Submission, job.submission_id)
        assert sub is not None
        sha = sub.version.bundle_sha256 if which == "bundle" else sub.archive_sha256
    return Response(artifacts.read(root=settings.artifacts_dir, sha256=sha),
                    media_type="application/zip")


@router.get("/jobs/{job_id}/bundle", responses={200: {"content": {"application/zip": {}}}})
def bundle(job_id: RowId, _: RunnerDep, token: JobToken, session: SessionDep,
           settings: SettingsDep) -> Response:
    return _artifact(session, settings, job_id, token, "bundle")


@router.get("/jobs/{job_id}/submission", responses={200: {"content": {"application/zip": {}}}})
def submission(job_id: RowId, _: RunnerDep, token: JobToken, session: SessionDep,
               settings: SettingsDep) -> Response:
    return _artifact(session, settings, job_id, token, "submission")


@router.post("/jobs/{job_id}/result", status_code=status.HTTP_204_NO_CONTENT)
def result(job_id: RowId, outcome: JobOutcome, _: RunnerDep, token: JobToken,
           session: SessionDep, settings: SettingsDep) -> None:
    """Record the outcome once (a redelivery changes nothing)."""
    job = job_service.authorize(session=session, job_id=job_id, token=token)
    job_service.record(session=session, job=job, outcome=outcome,
                       max_attempts=settings.max_job_attempts)
    session.commit()
