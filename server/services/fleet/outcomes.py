"""What becomes of a claimed job: its runner's outcome recorded once, or, when the runner went
silent, ran past the time limit or lost its credential, the job taken back (queued again, or
failed on the platform's side after its last attempt, never charged to a student)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from runners.protocol import JobOutcome
from server.metrics import GRADING_LATENCY
from server.models import AssignmentVersion, Job, Runner, SimilarityRun, Submission, aware, now
from server.services.grades import finals, grading
from server.services.records import jobs

PLATFORM_ERROR = "platform_error"


def record(*, session: Session, job: Job, outcome: JobOutcome, max_attempts: int) -> None:
    """Store a runner's outcome once; a redelivered result changes nothing."""
    if job.state == "done":
        return
    _free_runner(session, job)
    if job.kind == "validate":
        _record_validation(session=session, job=job, outcome=outcome, max_attempts=max_attempts)
        return
    if job.kind == "similarity":
        _record_similarity(session=session, job=job, outcome=outcome, max_attempts=max_attempts)
        return
    if job.kind == "final":
        _record_final(session=session, job=job, outcome=outcome, max_attempts=max_attempts)
        return
    sub = session.get(Submission, job.submission_id)
    assert sub is not None
    if outcome.report is None:
        _platform_failure(session=session, job=job, sub=sub, max_attempts=max_attempts,
                          reason=outcome.platform_error or "no report")
        return
    grading.store_report(session=session, sub=sub, report=outcome.report)
    _done(job)
    session.flush()
    GRADING_LATENCY.observe((now() - aware(sub.created_at)).total_seconds())


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
    if job.kind == "validate":
        _record_validation(session=session, job=job, max_attempts=max_attempts,
                           outcome=JobOutcome(platform_error=reason))
    elif job.kind == "similarity":
        _record_similarity(session=session, job=job, max_attempts=max_attempts,
                           outcome=JobOutcome(platform_error=reason))
    elif job.kind == "final":
        _record_final(session=session, job=job, max_attempts=max_attempts,
                      outcome=JobOutcome(platform_error=reason))
    else:
        sub = session.get(Submission, job.submission_id)
        assert sub is not None
        _platform_failure(session=session, job=job, sub=sub, max_attempts=max_attempts,
                          reason=reason)


def hand_back(*, session: Session, job: Job) -> None:
    """A runner gave its claimed job back before it could finish (it is leaving): queued again
    at once, its secret void, and the attempt not counted (nothing was measured)."""
    _free_runner(session, job)
    job.attempts = max(0, job.attempts - 1)
    _queued_again(session, job)
    if job.kind == "similarity":
        run = session.get(SimilarityRun, job.run_id)
        if run is not None:
            run.status = "queued"
    elif job.kind == "grade":
        sub = session.get(Submission, job.submission_id)
        if sub is not None:
            sub.status, sub.started_at = "queued", None
    elif job.kind == "final":
        finals.requeued(session=session, job=job)
    session.flush()


def _free_runner(session: Session, job: Job) -> None:
    """The runner that held the job holds it no more (as far as the fleet page is concerned)."""
    if job.runner is not None:
        session.execute(update(Runner).where(Runner.name == job.runner, Runner.current_job_id ==
                                             job.id).values(current_job_id=None))


def _done(job: Job) -> None:
    job.state, job.token_hash, job.finished_at = "done", None, now()


def _queued_again(session: Session, job: Job) -> None:
    job.state, job.token_hash, job.runner, job.runner_key_hash = "queued", None, None, None
    jobs.publish(session, job)


def _record_validation(*, session: Session, job: Job, outcome: JobOutcome,
                       max_attempts: int) -> None:
    version = session.get(AssignmentVersion, job.version_id)
    assert version is not None
    if outcome.checks is None:
        if job.attempts < max_attempts:
            _queued_again(session, job)
            return
        version.status = "error"
        version.checks = [{"name": "platform", "ok": False, "skipped": None,
                           "problems": [grading.storable(outcome.platform_error or "no result")]}]
    else:
        version.status = "ready" if all(c.ok for c in outcome.checks) else "invalid"
        a = version.assignment
        if version.status == "ready" and (a.current_version_id or 0) < version.id:
            a.current_version_id, a.title = version.id, version.manifest["title"]
        version.checks = [{**c.model_dump(), "problems": [grading.storable(p) for p in c.problems]}
                          for c in outcome.checks]
    _done(job)
    session.flush()


def _record_similarity(*, session: Session, job: Job, outcome: JobOutcome,
                       max_attempts: int) -> None:
    run = session.get(SimilarityRun, job.run_id)
    assert run is not None
    if outcome.similarity is None:
        if job.attempts < max_attempts:
            _queued_again(session, job)
            run.status = "queued"
            return
        run.status, run.error = "error", grading.storable(outcome.platform_error or "no result")
    else:
        # Only pairs of the run's own submissions are kept (a runner cannot name others).
        ids = set(run.submission_ids)
        result = outcome.similarity.model_copy(update={"pairs": [
            p for p in outcome.similarity.pairs if {p.a, p.b} <= ids and p.a != p.b]})
        run.status, run.result = "done", result.model_dump(mode="json")
    run.finished_at = now()
    _done(job)
    session.flush()


def _record_final(*, session: Session, job: Job, outcome: JobOutcome, max_attempts: int) -> None:
    """A final run's turn: its figure, or, failed on the platform's side, queued again until its
    last attempt (then the turn is left out of the student's median)."""
    if outcome.report is None and job.attempts < max_attempts:
        _queued_again(session, job)
        finals.requeued(session=session, job=job)
        return
    _done(job)
    finals.turn_ended(session=session, job=job, report=outcome.report,
                      error=outcome.platform_error)


def _platform_failure(*, session: Session, job: Job, sub: Submission, max_attempts: int,
                      reason: str) -> None:
    sub.counts_for_quota = False  # never charged to the student
    if job.attempts < max_attempts:
        _queued_again(session, job)
        sub.status = "queued"
    else:
        _done(job)
        sub.status, sub.verdict, sub.finished_at = "error", PLATFORM_ERROR, now()
    session.flush()
