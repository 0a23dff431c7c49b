"""Which queue a GPU task that can be simulated waits on: a real GPU's, or the simulator's.

A GPU package may say its kernels run under numba's CUDA simulator (`resources.simulate_gpu`,
t3): a runner without a GPU then grades it for correctness, with no speedup points, as the
package's statement promises. Such runners serve the `gpusim` queue (the one-command start's
local runner does, on a machine without a GPU). A real GPU is always preferred: a simulable
task's jobs wait on `gpu` while a live runner serves it, and on `gpusim` only while none does and
a simulating runner is live. The reaper applies the rule to the jobs still queued (`reroute`), so
a job queued before its runner said hello moves once it has, and moves back to `gpu` when a GPU
runner comes. A package that cannot be simulated (t4: CuPy has none) always waits on `gpu`, and
its page keeps saying why.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from server.models import AssignmentVersion, Job, Submission
from server.services.fleet import state as fleet
from server.services.records import jobs


def simulable(manifest: dict[str, Any]) -> bool:
    """Whether a stored manifest's package is a GPU task its statement lets a simulator grade."""
    resources = manifest.get("resources") or {}
    return resources.get("kind") == "gpu" and bool(resources.get("simulate_gpu")) and \
        int(resources.get("nodes") or 1) == 1


def target(*, session: Session, live_s: int) -> str | None:
    """Where simulable GPU jobs should wait now: 'gpu' while a live runner serves it, else
    'gpusim' while a live one serves that; None when neither is live (they stay put)."""
    live = fleet.live_runners(session=session, live_s=live_s)
    if any("gpu" in r.queues for r in live):
        return "gpu"
    if any("gpusim" in r.queues for r in live):
        return "gpusim"
    return None


def queue_for(*, session: Session, manifest: dict[str, Any], queue: str, live_s: int) -> str:
    """The queue a new job of this package goes to now: its resources' `queue`, unless it is a
    simulable GPU task (a submission then never reads "waiting for a GPU runner" where a
    simulating runner is live)."""
    if simulable(manifest):
        return target(session=session, live_s=live_s) or queue
    return queue


def reroute(*, session: Session, live_s: int) -> int:
    """Move the queued jobs of simulable GPU packages to the queue `target` names, each
    published again there (a message left on the other queue finds its job gone from it and
    is refused); how many moved."""
    to = target(session=session, live_s=live_s)
    if to is None:
        return 0
    away = "gpusim" if to == "gpu" else "gpu"
    # One query for the queue's jobs and their packages' manifests (at a deadline the gpu queue
    # may hold hundreds, and the reaper asks every few seconds).
    version = func.coalesce(Job.version_id, Submission.version_id)
    rows = session.execute(
        select(Job, AssignmentVersion.manifest)
        .outerjoin(Submission, Job.submission_id == Submission.id)
        .join(AssignmentVersion, AssignmentVersion.id == version)
        .where(Job.state == "queued", Job.queue == away).order_by(Job.priority, Job.id)).all()
    moved = 0
    for job, manifest in rows:
        if simulable(dict(manifest)):
            job.queue = to
            jobs.publish(session, job)
            moved += 1
    return moved
