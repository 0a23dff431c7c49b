"""A runner takes a job: the claim, the per-job secret it receives, its heartbeats.

A runner that gets a job's message claims a job over HTTP with its credential (compare-and-set,
so no job is claimed twice) and receives a per-job secret for the job's bundle, archive,
heartbeats and result.

A message is a turn on its job's queue: the claim takes the most urgent job queued there
(priority, then age), which is the message's own unless a more urgent one came after it, there
or, strictly more urgent, on another queue the runner said it serves (a check of a two-node
package on `mpinodes` does not go before a student's first submission on `cpu`). The
embedded broker delivers in publish order whatever the priority, so without this a student's
first submission waited behind every shipped package's validation on a fresh start (about 2.5
minutes). A message whose job is taken, or gone, takes the next one; one finding none is
refused. Only a job whose time limit fits the message's is taken (the broker enforces the
message's). A message that took another job than its own publishes its own again, so every
queued job keeps a message of its own: none waits for the reaper's sweep, which at a deadline
(a queue never empty) could be long.

A job answers only the runner process that claimed it. Every runner process makes a random key
at its start and sends it with the claim and with every request about the job; the claim stores
its hash beside the per-job secret's. `authorize` wants all three: the runner's credential says
"this runner" (services/fleet/runner_credentials.py: a credential's runner claims only
under its own name and on its own queues), the key says "this process of it", the per-job
secret says "this attempt". So
another runner cannot fetch, renew or report a job someone else claimed, even with its per-job
secret (a log line, a proxy). What the shared fleet token cannot stop: its holder claims queued
jobs of any queue under a name nobody holds (see docs/security.md).
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import case, select, update
from sqlalchemy.orm import Session

from runners.protocol import QUEUES, JobOffer
from server import security
from server.models import Job, Runner, now
from server.services.fleet.kinds import KINDS
from server.services.records import jobs
from server.services.records.errors import Conflict, Forbidden, NotFound

CLAIM_TRIES = 5
"""Jobs a claim tries in turn when runners race for the same one."""


def claim(*, session: Session, job_id: int, runner: str, runner_key: str,
          queues: Collection[str] = QUEUES, across: Collection[str] = ()) -> JobOffer:
    """Claim for `runner`, bound to its key (compare-and-set), the most urgent queued job of the
    queue of job `job_id` (the message's), or of one of `across` (the queues the runner serves)
    where one is strictly more urgent, whose time limit fits that job's; Conflict if none is
    queued, Forbidden (the jobs left queued) if the queue is not one of `queues`."""
    named = session.execute(select(Job.queue, Job.time_limit_s, Job.state)
                            .where(Job.id == job_id)).one_or_none()
    if named is None:
        raise NotFound("no such job")
    queue, limit, state = named
    if queue not in queues:
        raise Forbidden(f"runner {runner} does not serve the {queue} queue (its credential "
                        f"and its hello give it {', '.join(sorted(queues)) or 'none'})")
    token = security.new_token()
    job = None
    pool = {queue} | (set(across) & set(queues))
    for _ in range(CLAIM_TRIES):
        pick = session.scalar(select(Job.id).where(
            Job.state == "queued", Job.queue.in_(pool), Job.time_limit_s <= limit)
            .order_by(Job.priority, case((Job.kind == "practice", 1), else_=0),
                      case((Job.queue == queue, 0), else_=1), Job.id).limit(1))
        if pick is None:
            break
        won = session.execute(
            update(Job).where(Job.id == pick, Job.state == "queued")
            .values(state="claimed", token_hash=security.token_hash(token), runner=runner,
                    runner_key_hash=security.token_hash(runner_key),
                    claimed_at=now(), heartbeat_at=now(), attempts=Job.attempts + 1))
        if won.rowcount == 1:  # type: ignore[attr-defined]
            job = session.get(Job, pick)
            break
        session.rollback()  # another runner took it first: the next one
    if job is None:
        session.rollback()
        raise Conflict(f"job {job_id} is {state}, not queued, and no job waits in the {queue} "
                       "queue")
    session.refresh(job)
    if job.id != job_id and (own := session.get(Job, job_id)) is not None and own.state == "queued":
        jobs.publish(session, own)  # its message went to a more urgent job
    session.execute(update(Runner).where(Runner.name == runner).values(current_job_id=job.id))
    offer = KINDS[job.kind].offer(session, job)
    session.commit()
    return JobOffer(job_id=job.id, token=token, **offer)


def authorize(*, session: Session, job_id: int, token: str, runner_key: str,
              runner: str | None = None) -> Job:
    """The job this per-job secret was issued for (claimed, not yet finished), asked about by
    the runner process that claimed it; `runner`: the name the caller's credential gives it
    (None: the fleet token)."""
    job = session.get(Job, job_id)
    if job is None:
        raise NotFound("no such job")
    # Both compared, always: the answer takes as long whichever of the two is wrong.
    token_ok = job.token_hash is not None and security.same_secret(
        job.token_hash, security.token_hash(token))
    key_ok = job.runner_key_hash is not None and security.same_secret(
        job.runner_key_hash, security.token_hash(runner_key))
    if not token_ok:
        raise Forbidden(f"this token is not valid for this job (the job is {job.state})")
    if not key_ok or (runner is not None and job.runner != runner):
        raise Forbidden("this job was claimed by another runner")
    return job


def heartbeat(*, session: Session, job: Job) -> None:
    """The runner is still at it: extend the job's lease."""
    job.heartbeat_at = now()
    if job.runner is not None:
        session.execute(update(Runner).where(Runner.name == job.runner)
                        .values(current_job_id=job.id, last_seen=now()))
