"""The runner fleet and its queues, as instructors see them."""

from __future__ import annotations

from fastapi import APIRouter

from runners.protocol import QUEUES
from server.deps import DispatcherDep, InstructorUser, SessionDep, SettingsDep
from server.schemas import ErrorPublic, FleetPublic, QueuePublic, RunnerPublic
from server.services import jobs as job_service

router = APIRouter(prefix="/api", tags=["fleet"],
                   responses={401: {"model": ErrorPublic}, 403: {"model": ErrorPublic}})


@router.get("/fleet", response_model=FleetPublic)
def fleet(_: InstructorUser, session: SessionDep, settings: SettingsDep,
          dispatcher: DispatcherDep) -> FleetPublic:
    """Every runner that announced itself (live or not) and each queue's depth."""
    live = {r.name for r in job_service.live_runners(session=session, live_s=settings.runner_live_s)}
    runners = [RunnerPublic(name=r.name, queues=r.queues, capabilities=r.capabilities,
                            current_job_id=r.current_job_id, first_seen=r.first_seen,
                            last_seen=r.last_seen, live=r.name in live)
               for r in job_service.all_runners(session=session)]
    depth = job_service.depth(session=session)
    broker = dispatcher.depth()
    queues = {q: QueuePublic(queued=depth[q]["queued"], running=depth[q]["claimed"],
                             in_broker=None if broker is None else broker.get(q, 0),
                             live_runners=sum(1 for r in runners if r.live and q in r.queues))
              for q in QUEUES}
    return FleetPublic(runners=runners, queues=queues)
