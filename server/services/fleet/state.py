"""The fleet as the server sees it: each runner as it last announced itself, whether it is live,
and what each queue holds and who serves it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from runners.protocol import BUSY_PRESSURE, RunnerHello
from server.models import Job, QueueScale, Runner, aware, now
from server.services.records import jobs


def hello(*, session: Session, runner: RunnerHello) -> None:
    """Record (or refresh) a runner's announcement: its capabilities and that it is alive
    (services/fleet/runner_credentials.py decides who may say it)."""
    row = session.get(Runner, runner.name)
    caps = runner.model_dump(mode="json", exclude={"name", "queues", "current_job"})
    if row is None:
        row = Runner(name=runner.name, queues=list(runner.queues), capabilities=caps)
        session.add(row)
    row.queues, row.capabilities, row.last_seen = list(runner.queues), caps, now()
    if runner.current_job is not None:
        row.current_job_id = runner.current_job
    elif row.current_job_id is not None:  # the claim set it; keep it while the job runs there
        job = session.get(Job, row.current_job_id)
        if job is None or job.state != "claimed" or job.runner != runner.name:
            row.current_job_id = None
    session.flush()


def node_state(runner: Runner) -> str | None:
    """What a runner's last heartbeat said of its node's cores (None: it did not say)."""
    pressure = runner.capabilities.get("pressure")
    if not isinstance(pressure, int | float):
        return None
    if pressure > BUSY_PRESSURE:
        return (f"busy: CPU pressure {pressure:.0f} % (other work kept its cores; its gradings' "
                "performance points wait for a free node)")
    return f"quiet: CPU pressure {pressure:.0f} %"


def all_runners(*, session: Session) -> list[Runner]:
    return list(session.scalars(select(Runner).order_by(Runner.name)))


def live_runners(*, session: Session, live_s: int) -> list[Runner]:
    """Runners heard from (a hello or a heartbeat) within the last `live_s` seconds."""
    cutoff = now() - timedelta(seconds=live_s)
    return [r for r in all_runners(session=session) if aware(r.last_seen) >= cutoff]


SCALE_FRESH_S = 120
"""A scaler's decision older than this is not shown as the fleet's plan (the scaler stopped)."""


@dataclass(frozen=True)
class QueueState:
    name: str
    queued: int
    claimed: int
    broker: int | None  # messages in the broker; None when it is unreachable
    live: int  # live runners serving it
    scale: QueueScale | None = None  # the fleet scaler's last decision, while it is fresh


def scale_plans(*, session: Session) -> dict[str, QueueScale]:
    """Each queue's fleet scaler decision (services/fleet/autoscaling.py), if one was made lately."""
    cutoff = now() - timedelta(seconds=SCALE_FRESH_S)
    return {row.queue: row for row in session.scalars(select(QueueScale))
            if aware(row.updated_at) >= cutoff}


def fleet(*, session: Session, live_s: int, broker_depth: dict[str, int] | None
          ) -> tuple[list[tuple[Runner, bool]], list[QueueState]]:
    """Every runner with whether it is live, and the state of each queue."""
    live = {r.name for r in live_runners(session=session, live_s=live_s)}
    runners = [(r, r.name in live) for r in all_runners(session=session)]
    plans = scale_plans(session=session)
    queues = [QueueState(name=q, queued=n["queued"], claimed=n["claimed"],
                         broker=None if broker_depth is None else broker_depth.get(q, 0),
                         live=sum(1 for r, up in runners if up and q in r.queues),
                         scale=plans.get(q))
              for q, n in jobs.depth(session=session).items()]
    return runners, queues


WAITING = {"gpu": "waiting for a GPU runner", "mpi": "waiting for an MPI runner",
           "mpinodes": "waiting for a runner that holds two nodes or more (a cluster's, or this "
                       "server's own runner where it may stand nodes in: run as root)",
           "gpusim": "waiting for a runner that grades GPU tasks under the CUDA simulator",
           "cpu": "waiting for a runner"}
"""What a student reads of a job no live runner serves, by queue (any other queue: 'waiting for
a runner serving the <queue> queue')."""


def waiting_for(*, session: Session, queue: str, live_s: int) -> str | None:
    """Why a queued job is not moving, when no live runner serves its queue: a runner being
    started for it (with how long that takes lately), or none serving it at all."""
    if any(queue in r.queues for r in live_runners(session=session, live_s=live_s)):
        return None
    plan = scale_plans(session=session).get(queue)
    if plan is not None and plan.desired > 0:
        if plan.start_s is None:
            return "starting a runner (a batch job waiting for a node)"
        return f"starting a runner, about {max(5, round(plan.start_s / 5) * 5):.0f} s"
    return WAITING.get(queue, f"waiting for a runner serving the {queue} queue")
