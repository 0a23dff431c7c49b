"""What becomes of a claimed job: its runner's outcome recorded once, or, when the runner went
silent, ran past the time limit or lost its credential, the job taken back (queued again, or
failed on the platform's side after its last attempt, never charged to a student)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from runners.protocol import JobOutcome
from server.models import Job, Runner, aware, now
from server.services.fleet.kinds import KINDS, queued_again


def record(*, session: Session, job: Job, outcome: JobOutcome, max_attempts: int) -> None:
    """Store a runner's outcome once; a redelivered result changes nothing."""
    if job.state == "done":
        return
    _free_runner(session, job)
    KINDS[job.kind].record(session, job, outcome, max_attempts)


def reap(*, session: Session, lease_s: int, max_attempts: int) -> int:
    """Re-queue (or fail) claimed jobs whose runner went silent or ran past the time limit."""
    n = 0
    for job in session.scalars(select(Job).where(Job.state == "claimed")):
        beat = job.heartbeat_at or job.claimed_at
        assert beat is not None and job.claimed_at is not None
        silent = aware(beat) < now() - timedelta(seconds=lease_s)
        overdue = aware(job.claimed_at) < now() - timedelta(seconds=job.time_limit_s + 120)
        if not (silent or overdue):
            continue
        reason = "the runner stopped reporting" if silent else "the job ran past its time limit"
        release(session=session, job=job, max_attempts=max_attempts, reason=reason)
        n += 1
    return n


def release(*, session: Session, job: Job, max_attempts: int, reason: str) -> None:
    """Take a claimed job from its runner: queued again (its secret void), or failed on the
    platform's side after `max_attempts`; never charged to a student."""
    _free_runner(session, job)
    KINDS[job.kind].record(session, job, JobOutcome(platform_error=reason), max_attempts)


def hand_back(*, session: Session, job: Job) -> None:
    """A runner gave its claimed job back before it could finish (it is leaving): queued again
    at once, its secret void, and the attempt not counted (nothing was measured)."""
    _free_runner(session, job)
    job.attempts = max(0, job.attempts - 1)
    queued_again(session, job)
    KINDS[job.kind].handed_back(session, job)
    session.flush()


def _free_runner(session: Session, job: Job) -> None:
    """The runner that held the job holds it no more (as far as the fleet page is concerned)."""
    if job.runner is not None:
        session.execute(update(Runner).where(Runner.name == job.runner, Runner.current_job_id ==
                                             job.id).values(current_job_id=None))
