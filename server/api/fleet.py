"""The runner fleet and its queues, as instructors see them."""

from __future__ import annotations

from fastapi import APIRouter

from server.deps import DispatcherDep, InstructorUser, SessionDep, SettingsDep
from server.schemas import ErrorPublic, FleetPublic, QueuePublic, QueueScalePublic, RunnerPublic
from server.services.fleet import state as fleet_service

router = APIRouter(prefix="/api", tags=["fleet"],
                   responses={401: {"model": ErrorPublic}, 403: {"model": ErrorPublic}})


@router.get("/fleet", response_model=FleetPublic)
def fleet(_: InstructorUser, session: SessionDep, settings: SettingsDep,
          dispatcher: DispatcherDep) -> FleetPublic:
    """Every runner that announced itself (live or not) and each queue's depth."""
    runners, queues = fleet_service.fleet(session=session, live_s=settings.runner_live_s,
                                          broker_depth=dispatcher.depth())
    return FleetPublic(
        runners=[RunnerPublic(name=r.name, queues=r.queues, capabilities=r.capabilities,
                              current_job_id=r.current_job_id, first_seen=r.first_seen,
                              last_seen=r.last_seen, live=up) for r, up in runners],
        queues={q.name: QueuePublic(
            queued=q.queued, running=q.claimed, in_broker=q.broker, live_runners=q.live,
            scale=None if q.scale is None else QueueScalePublic.model_validate(q.scale))
            for q in queues})
