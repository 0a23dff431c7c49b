"""Whether students may submit to an assignment yet and, while they may not, the one sentence
they read instead of a status word or an error.

An assignment whose current version is not ready is in one of these states:

- its validation waits for a runner: no live runner serves its queue (none that serves it said
  hello or sent a heartbeat within the server's `runner_live_s`): "waiting for a GPU runner",
  in services/fleet/state.py's words for each queue;
- it is being checked: a live runner serves its queue, or holds the job: "being checked, ready
  in about N s";
- its package failed its checks, or could not be checked: said so, without the details, which
  its instructors see.

How N is estimated. A job's expected length is, for a validation, how long the last finished
validation of the same assignment took (an earlier version of its package: the same tests,
nearly always about the same time), else of the same package in another course (a second
section, the next term on the same server); otherwise the median of the last `HISTORY` finished
jobs of its kind on its queue; otherwise, on a server that has finished none yet,
`FIRST_VALIDATION_S` or `FIRST_GRADING_S`. What is left of a claimed job is its expected length
less the time it has run; once it has run longer than expected, the expectation was wrong by at
least the overrun, and it is expected to run as long again (a first start's t5-ddp check runs 60
s against a typical 10 s: without this, every package queued behind it said "about 15 s" for a
minute). A claimed validation is ready when what is left of it is done. A queued one first waits
for the jobs ahead of it (the broker's order: priority, then id) in its queue and in every other
queue its runners serve (a runner takes the most urgent job of all its queues: on a first start
the one local runner serves cpu, mpi, gpusim and mpinodes), and for what is left of the jobs
those runners hold, that work shared among the live runners serving the queue; then it runs its
own expected length. N is never below `SOON_S`, and is rounded up (to 5 s, or to whole minutes
from 2 minutes on). Once said, N only shrinks until that moment passes (`kept`).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from server.models import Assignment, AssignmentVersion, Job, Submission, aware, now
from server.services.fleet import state as fleet

NOT_OPEN = "not open for submissions yet"
"""What precedes the reason, wherever a student meets it alone (a refused submission)."""
FAILED = {
    "invalid": "its package failed its checks; your instructors can see why",
    "error": "its package could not be checked; your instructors can see why",
}
HISTORY = 20
"""Finished jobs of one kind on one queue whose median is a job's typical length: the recent
ones, as a runner's load and the packages change."""
FIRST_VALIDATION_S = 15.0
"""A validation's length before this server has finished one: the median of the shipped CPU and
MPI packages' on a busy 2-core runner (t1 4 s, dask 7 s, numba-parallel 16 s, t5-ddp under
torchrun 60 s): the reference's, the starter's and the baseline's tests, then one timed run of
the baseline and the reference."""
FIRST_GRADING_S = 60.0
"""A grading's length before this server has finished one: tests, then timed runs within the
package's timing budget (12 to 60 s for the shipped ones), then the scaling study."""
SOON_S = 5
"""The least N promised: a job at its expected end is finishing, and reporting takes a moment."""
MAX_AHEAD = 500
"""Jobs ahead that are summed one by one; beyond them the wait is long however it is counted."""


def reason(*, session: Session, assignment: Assignment, live_s: int) -> str | None:
    """Why students cannot submit to the assignment yet, in words they read; None when they can."""
    version = assignment.current_version
    if version is None or version.status == "ready":
        return None
    if version.status in FAILED:
        return FAILED[version.status]
    job = session.scalar(select(Job).where(Job.kind == "validate", Job.version_id == version.id)
                         .order_by(Job.id.desc()).limit(1))
    if job is None or job.state not in ("queued", "claimed"):  # nothing left to wait for
        return f"being checked, ready in {about(FIRST_VALIDATION_S)}"
    if job.state == "queued":
        waiting = fleet.waiting_for(session=session, queue=job.queue, live_s=live_s)
        if waiting is not None:
            return waiting
    eta = kept((str(session.get_bind().engine.url), job.id, aware(job.created_at).isoformat()),
               seconds_to_ready(session=session, job=job, live_s=live_s))
    return f"being checked, ready in {about(eta)}"


_promised: dict[tuple[str, int, str], float] = {}
"""When each job still being checked was said to be ready (time.monotonic()), by its database,
id and creation (an id a restored backup gives again is another job)."""
PROMISES_KEPT = 1000


def kept(job: tuple[str, int, str], eta: float) -> float:
    """The estimate a reader is told: never later than what this process told before for the
    same job while that still lies ahead (a job ahead running long, or a runner leaving, would
    make a countdown climb); a promise that passed gives way to the new estimate. Per process:
    each of a server's workers keeps its own."""
    clock = time.monotonic()
    promised = _promised.get(job)
    if promised is not None and clock < promised <= clock + eta:
        return promised - clock
    if len(_promised) >= PROMISES_KEPT:  # the oldest promises are for jobs long done
        for old in sorted(_promised, key=_promised.__getitem__)[:PROMISES_KEPT // 2]:
            del _promised[old]
    _promised[job] = clock + eta
    return eta


def refusal(*, session: Session, assignment: Assignment, live_s: int) -> str | None:
    """The message a refused submission gets (the same words as the course page), or None."""
    why = reason(session=session, assignment=assignment, live_s=live_s)
    return None if why is None else f"{NOT_OPEN}: {why}"


def about(seconds: float) -> str:
    """'about 25 s', 'about 3 min': rounded up, never below SOON_S."""
    rounded = max(SOON_S, 5 * math.ceil(seconds / 5))
    return f"about {rounded} s" if rounded < 120 else f"about {math.ceil(rounded / 60)} min"


def seconds_to_ready(*, session: Session, job: Job, live_s: int) -> float:
    """When a queued or claimed job is expected to be done, in seconds from now (the module's
    docstring says how)."""
    expected = _expectations(session)
    mine = expected(job)
    if job.state == "claimed":
        return max(_left(mine, job), SOON_S)
    # The runners that serve this queue also take the other queues they serve, the most urgent
    # job first (services/fleet/claims.py): a job on any of those queues ahead of this one comes first.
    serving = [r for r in fleet.live_runners(session=session, live_s=live_s)
               if job.queue in r.queues]
    shared = {q for r in serving for q in r.queues} | {job.queue}
    ahead = session.scalars(select(Job).where(
        Job.state == "queued", Job.queue.in_(shared),
        tuple_(Job.priority, Job.id) < tuple_(job.priority, job.id))
        .order_by(Job.priority, Job.id).limit(MAX_AHEAD))
    held = session.scalars(select(Job).where(Job.state == "claimed", Job.queue.in_(shared)))
    work = sum(expected(j) for j in ahead) + sum(_left(expected(j), j) for j in held)
    return max(work / max(len(serving), 1) + mine, SOON_S)


def _elapsed(job: Job) -> float:
    return 0.0 if job.claimed_at is None else (now() - aware(job.claimed_at)).total_seconds()


def _left(expected: float, job: Job) -> float:
    """What is left of a claimed job expected to take `expected` s (the module's docstring)."""
    elapsed = _elapsed(job)
    return expected - elapsed if elapsed <= expected else elapsed - expected


def _expectations(session: Session) -> Callable[[Job], float]:
    """A job's expected length, each figure read once per estimate."""
    typical: dict[tuple[str, str], float] = {}
    own: dict[int, float | None] = {}

    def expected(job: Job) -> float:
        if job.kind == "validate" and job.version_id is not None:
            if job.version_id not in own:
                own[job.version_id] = _last_validation_s(session, job.version_id)
            if (seconds := own[job.version_id]) is not None:
                return seconds
        key = (job.kind, job.queue)
        if key not in typical:
            typical[key] = _typical_s(session, job.kind, job.queue)
        return typical[key]

    return expected


def _last_validation_s(session: Session, version_id: int) -> float | None:
    """How long the last finished validation of this version's package took: of this assignment
    (any version of it that the runner checked, failed checks included: they ran the same tests),
    else of the same package in any course (a second section, the next term)."""
    mine = select(Assignment.id, Assignment.slug).join(
        AssignmentVersion, AssignmentVersion.assignment_id == Assignment.id).where(
        AssignmentVersion.id == version_id).subquery()
    for same in (Assignment.id == select(mine.c.id).scalar_subquery(),
                 Assignment.slug == select(mine.c.slug).scalar_subquery()):
        row = session.execute(
            select(Job.claimed_at, Job.finished_at)
            .join(AssignmentVersion, AssignmentVersion.id == Job.version_id)
            .join(Assignment, Assignment.id == AssignmentVersion.assignment_id)
            .where(Job.kind == "validate", Job.finished_at.is_not(None), same,
                   AssignmentVersion.status.in_(("ready", "invalid")))
            .order_by(Job.finished_at.desc()).limit(1)).first()
        if row is not None:
            return _length(row.claimed_at, row.finished_at)
    return None


def _typical_s(session: Session, kind: str, queue: str) -> float:
    """The median length of the last HISTORY jobs of this kind that ran to an answer on this
    queue (a platform failure's length is its lease running out, not the job's)."""
    q = select(Job.claimed_at, Job.finished_at).where(
        Job.kind == kind, Job.queue == queue, Job.finished_at.is_not(None))
    if kind == "validate":
        q = q.join(AssignmentVersion, AssignmentVersion.id == Job.version_id).where(
            AssignmentVersion.status.in_(("ready", "invalid")))
    elif kind == "grade":
        q = q.join(Submission, Submission.id == Job.submission_id).where(
            Submission.status == "graded")
    rows = session.execute(q.order_by(Job.finished_at.desc()).limit(HISTORY)).all()
    lengths = [s for r in rows if (s := _length(r.claimed_at, r.finished_at)) is not None]
    if lengths:
        return statistics.median(lengths)
    return FIRST_VALIDATION_S if kind == "validate" else FIRST_GRADING_S


def _length(claimed_at: datetime | None, finished_at: datetime | None) -> float | None:
    if claimed_at is None or finished_at is None:
        return None
    return max((aware(finished_at) - aware(claimed_at)) / timedelta(seconds=1), 0.0)
