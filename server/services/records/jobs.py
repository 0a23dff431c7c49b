"""Jobs as the database holds them: queued, published to the broker, superseded or cancelled.

A job is ids and data (protocol.GradeJob). Enqueueing puts a message (the job id) in the
session's outbox; the dispatcher publishes it once the transaction commits. A runner that gets
the message claims the job over HTTP (services/fleet/claims.py); what it reports, or its silence, decides
what becomes of the job (services/fleet/outcomes.py). The database, not the broker, says what is done.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from runners.protocol import LOWEST_PRIORITY, QUEUES, Manifest, Resources
from server.dispatch import Message, outbox
from server.models import AssignmentVersion, Job, SimilarityRun, Submission, aware, now


def publish(session: Session, job: Job, *, stamp: bool = True) -> None:
    """Publish the job's id once the caller's transaction commits."""
    if stamp:  # `stamp=False`: the job was inserted with its time (no second UPDATE)
        job.published_at = now()
    outbox(session).append(Message(job_id=job.id, queue=job.queue, priority=job.priority,
                                   time_limit_s=job.time_limit_s))


def fair_priority(*, session: Session, user_id: int) -> int:
    """0 for a student with nothing pending, one step later for each job they already have waiting.

    At a deadline, a student who submits ten times does not push everyone else's first
    submission back: the broker serves lower numbers first.
    """
    pending = session.scalar(select(func.count()).select_from(Job).join(
        Submission, Job.submission_id == Submission.id).where(
        Submission.user_id == user_id, Job.state.in_(("queued", "claimed")))) or 0
    return min(int(pending), LOWEST_PRIORITY - 1)


VALIDATION_PRIORITY = 1
"""A package's check waits behind students' first pending submissions (0), beside their second
ones: on a fresh start, with every shipped package to check, the first student to submit is
graded next rather than after all of them (services/fleet/claims.py)."""


SHIPPED_VALIDATION_PRIORITY = 2
"""A shipped course's package, checked as the server starts, waits behind the package an
instructor imports now (a first term's own package behind a dozen shipped checks waited 5.5
minutes, t5-ddp's alone 205 s)."""


def time_limit_s(resources: Resources) -> int:
    """A grading job's limit on the runner (a practice run's too: a practice job's message may
    then take a graded job queued after it, services/fleet/claims.py)."""
    return resources.wall_seconds * 40


def enqueue(*, session: Session, submission: Submission, priority: int | None = None,
            manifest: Manifest | None = None, queue: str | None = None) -> Job:
    """A queued job for a submission (routed by the assignment's resources, or to `queue`),
    published to the broker once the caller's transaction commits; `manifest`: the version's,
    already parsed."""
    manifest = manifest or Manifest.model_validate(submission.version.manifest)
    queue = queue or manifest.resources.queue
    if priority is None:
        priority = fair_priority(session=session, user_id=submission.user_id)
    if submission.version.status != "ready":  # a grading before its package's check (staff
        priority = max(priority, SHIPPED_VALIDATION_PRIORITY)  # only) waits behind that check
    job = Job(submission_id=submission.id, queue=queue, priority=priority,
              time_limit_s=time_limit_s(manifest.resources), published_at=now())
    session.add(job)
    session.flush()
    publish(session, job, stamp=False)
    return job


def enqueue_validation(*, session: Session, version: AssignmentVersion, queue: str,
                       shipped: bool = False) -> Job:
    """A job that runs the engine's validate on a runner serving the package's queue; a shipped
    course's package (imported at a start) behind an instructor's own."""
    manifest = Manifest.model_validate(version.manifest)
    priority = SHIPPED_VALIDATION_PRIORITY if shipped else VALIDATION_PRIORITY
    job = Job(kind="validate", version_id=version.id, queue=queue, priority=priority,
              time_limit_s=manifest.resources.wall_seconds * 100)
    session.add(job)
    session.flush()
    publish(session, job)
    return job


def enqueue_similarity(*, session: Session, run: SimilarityRun) -> Job:
    """A job that compares a similarity run's submissions on a CPU runner (text only)."""
    job = Job(kind="similarity", run_id=run.id, queue="cpu", time_limit_s=3600)
    session.add(job)
    session.flush()
    publish(session, job)
    return job


def unpublished(*, session: Session, broker_depth: dict[str, int], grace_s: float) -> int:
    """Publish again the queued jobs of each queue the broker holds nothing for (lost messages).

    A queued job whose queue is empty in the broker lost its message (the broker restarted
    without persistence, or publishing failed) once it was published more than `grace_s` ago.
    Then the queue's every queued job is published again, in fair-share order: republishing only
    the stale ones would put them ahead of a fairer job submitted a moment later. Publishing one
    twice is harmless: the second claim is refused.
    """
    cutoff = now() - timedelta(seconds=grace_s)
    n = 0
    for queue in QUEUES:
        if broker_depth.get(queue, 0) > 0:
            continue
        waiting = list(session.scalars(select(Job).where(Job.state == "queued",
                                                         Job.queue == queue)
                                       .order_by(Job.priority, Job.id)))
        if any(j.published_at is None or aware(j.published_at) < cutoff for j in waiting):
            for job in waiting:
                publish(session, job)
            n += len(waiting)
    return n


def supersede(*, session: Session, submission: Submission, state: str) -> int:
    """End the submission's pending jobs (`superseded` or `cancelled`): their tokens stop working,
    so a runner still busy with one cannot record a grade."""
    done = session.execute(update(Job).where(Job.submission_id == submission.id,
                                             Job.state.in_(("queued", "claimed")))
                           .values(state=state, token_hash=None))
    return int(done.rowcount)  # type: ignore[attr-defined]


def requeue(*, session: Session, submission: Submission, priority: int | None = None) -> Job:
    """A new job for an existing submission (regrade onto the assignment's current version)."""
    supersede(session=session, submission=submission, state="superseded")
    current = submission.assignment.current_version
    if current is not None:
        submission.version_id = current.id
        session.flush()
        session.refresh(submission)
    # The previous verdict and score stand until the new grade lands: a regrade never makes a
    # student's best grade vanish from exports in the meantime.
    submission.status = "queued"
    return enqueue(session=session, submission=submission, priority=priority)


def depth(*, session: Session) -> dict[str, dict[str, int]]:
    """Jobs per queue and state (queued, claimed), as the database holds them."""
    out: dict[str, dict[str, int]] = {q: {"queued": 0, "claimed": 0} for q in QUEUES}
    rows = session.execute(select(Job.queue, Job.state, func.count())
                           .where(Job.state.in_(("queued", "claimed")))
                           .group_by(Job.queue, Job.state))
    for q, state, n in rows:
        out.setdefault(q, {"queued": 0, "claimed": 0})[state] = int(n)
    return out
