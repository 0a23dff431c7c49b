"""The runner side: announce itself, claim a job, fetch its bundle and archive, post its outcome.

Every route wants a runner's secret (RunnerDep: its own credential, or the fleet token) and its
process key (RunnerKey); services/fleet/runner_credentials.py says which names and queues a secret gives."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Header, Query, Response, status

from runners.protocol import PROTOCOL_VERSION, JobHandBack, JobOffer, JobOutcome, RunnerHello
from server.api import RowId
from server.deps import RunnerDep, RunnerKey, SessionDep, SettingsDep
from server.schemas import ErrorPublic
from server.services.fleet import claims as claim_service
from server.services.fleet import outcomes as outcome_service
from server.services.fleet import runner_credentials
from server.services.fleet.kinds import KINDS
from server.services.fleet.runner_credentials import RunnerIdentity
from server.services.records import artifacts
from server.services.records.errors import Conflict

router = APIRouter(prefix="/api/runner", tags=["runner"],
                   responses={401: {"model": ErrorPublic}, 403: {"model": ErrorPublic},
                              404: {"model": ErrorPublic}, 422: {"model": ErrorPublic}})
NO_NUL = r"^[^\x00]*$"  # PostgreSQL text cannot hold NUL
log = logging.getLogger("paragrade.runners")
JobToken = Annotated[str, Header(alias="X-Job-Token", description="The job's own secret")]


@router.post("/hello", status_code=status.HTTP_204_NO_CONTENT,
             responses={409: {"model": ErrorPublic, "description": "another protocol version"}})
def hello(body: RunnerHello, runner: RunnerDep, session: SessionDep) -> None:
    """A runner joins the fleet or says it is still alive (its capabilities, its current job),
    under the name and on the queues its credential gives it."""
    if body.protocol_version != PROTOCOL_VERSION:
        raise Conflict(f"this runner speaks protocol {body.protocol_version}, the server "
                       f"{PROTOCOL_VERSION}: run the same paragrade version on both")
    runner_credentials.hello(session=session, identity=runner, runner=body)
    session.commit()


@router.post("/jobs/{job_id}/claim", response_model=JobOffer,
             responses={409: {"model": ErrorPublic, "description": "not queued (done, "
                              "claimed, superseded or cancelled): drop the message"}})
def claim(job_id: RowId, identity: RunnerDep, key: RunnerKey, session: SessionDep,
          runner: Annotated[str, Query(pattern=NO_NUL, min_length=1, max_length=200)]
          ) -> JobOffer:
    """Claim the job a broker message named; a job is claimed once per attempt, and answers
    only the runner process (its X-Runner-Key) that claimed it. 403, the job left queued: a name
    or a queue the runner's credential does not give it."""
    runner_credentials.check_name(session=session, identity=identity, name=runner)
    return claim_service.claim(session=session, job_id=job_id, runner=runner, runner_key=key,
                               queues=runner_credentials.served(session=session, identity=identity,
                                                            name=runner),
                               across=runner_credentials.announced(session=session, identity=identity,
                                                               name=runner))


@router.post("/jobs/{job_id}/heartbeat", status_code=status.HTTP_204_NO_CONTENT)
def heartbeat(job_id: RowId, runner: RunnerDep, key: RunnerKey, token: JobToken,
              session: SessionDep) -> None:
    """Still grading: extends the job's lease. 403 once the job was cancelled or superseded,
    401 once the runner's credential was revoked."""
    job = runner_credentials.authorize(session=session, identity=runner, job_id=job_id,
                                   token=token, key=key)
    claim_service.heartbeat(session=session, job=job)
    session.commit()


def _artifact(session: SessionDep, settings: SettingsDep, job_id: int, token: str, key: str,
              runner: RunnerIdentity, which: str) -> Response:
    job = runner_credentials.authorize(session=session, identity=runner, job_id=job_id,
                                   token=token, key=key)
    kind = KINDS[job.kind]
    if which == "bundle":
        content = artifacts.read(root=settings.artifacts_dir, sha256=kind.bundle(session, job))
    else:
        content = kind.submission(session, job, settings.artifacts_dir)
    return Response(content, media_type="application/zip")


@router.get("/jobs/{job_id}/bundle", responses={200: {"content": {"application/zip": {}}}})
def bundle(job_id: RowId, runner: RunnerDep, key: RunnerKey, token: JobToken,
           session: SessionDep, settings: SettingsDep) -> Response:
    return _artifact(session, settings, job_id, token, key, runner, "bundle")


@router.get("/jobs/{job_id}/submission", responses={200: {"content": {"application/zip": {}}}})
def submission(job_id: RowId, runner: RunnerDep, key: RunnerKey, token: JobToken,
               session: SessionDep, settings: SettingsDep) -> Response:
    return _artifact(session, settings, job_id, token, key, runner, "submission")


@router.post("/jobs/{job_id}/result", status_code=status.HTTP_204_NO_CONTENT)
def result(job_id: RowId, outcome: JobOutcome, runner: RunnerDep, key: RunnerKey,
           token: JobToken, session: SessionDep, settings: SettingsDep) -> None:
    """Record the outcome once (a redelivery changes nothing), from the runner that claimed it."""
    job = runner_credentials.authorize(session=session, identity=runner, job_id=job_id,
                                   token=token, key=key)
    outcome_service.record(session=session, job=job, outcome=outcome,
                           max_attempts=settings.max_job_attempts)
    session.commit()


@router.post("/jobs/{job_id}/release", status_code=status.HTTP_204_NO_CONTENT)
def release(job_id: RowId, body: JobHandBack, runner: RunnerDep, key: RunnerKey,
            token: JobToken, session: SessionDep) -> None:
    """Give a claimed job back before it finished (the runner is leaving): queued again at once
    for another runner, the attempt not counted."""
    job = runner_credentials.authorize(session=session, identity=runner, job_id=job_id,
                                   token=token, key=key)
    log.info("job %s handed back by runner %s: %s", job.id, job.runner, body.reason)
    outcome_service.hand_back(session=session, job=job)
    session.commit()
