"""The dispatcher: grading jobs held in the database, claimed by runners over HTTP.

A job is ids and data (protocol.GradeJob). A runner claims one with the fleet's runner token and
gets a per-job secret for the job's bundle, archive and result; recording a result is idempotent.
The queue issue replaces claiming with Celery; these functions keep their meaning.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from runners.protocol import (
    GradeJob,
    GradeReport,
    JobOffer,
    JobOutcome,
    Manifest,
    ValidateJob,
)
from server import security
from server.models import (
    AssignmentVersion,
    GradeReportRow,
    Job,
    ScalingPointRow,
    Submission,
    TestResultRow,
    now,
)
from server.services.errors import Forbidden, NotFound

PLATFORM_ERROR = "platform_error"


def enqueue(*, session: Session, submission: Submission) -> Job:
    """A queued job for a committed submission (routed by the assignment's resources)."""
    manifest = Manifest.model_validate(submission.version.manifest)
    job = Job(submission_id=submission.id, queue=manifest.resources.kind)
    session.add(job)
    session.flush()
    return job


def enqueue_validation(*, session: Session, version: AssignmentVersion, queue: str) -> Job:
    """A job that runs the engine's validate on a runner serving the package's queue."""
    job = Job(kind="validate", version_id=version.id, queue=queue)
    session.add(job)
    session.flush()
    return job


def grade_job(submission: Submission, manifest: Manifest) -> GradeJob:
    a = submission.assignment
    return GradeJob(submission_id=submission.id, assignment=f"{a.course.slug}/{a.slug}",
                    assignment_version=submission.version.version,
                    bundle_sha256=submission.version.bundle_sha256,
                    submission_sha256=submission.archive_sha256, queue=manifest.resources.kind,
                    time_limit_s=manifest.resources.wall_seconds * 40,
                    entry_file=manifest.entry.file)


def claim(*, session: Session, runner: str, queues: list[str]) -> JobOffer | None:
    """The oldest queued job of these queues, claimed atomically (compare-and-set)."""
    candidates = session.scalars(select(Job.id).where(Job.state == "queued",
                                                      Job.queue.in_(queues))
                                 .order_by(Job.id).limit(10)).all()
    for job_id in candidates:
        token = security.new_token()
        won = session.execute(
            update(Job).where(Job.id == job_id, Job.state == "queued")
            .values(state="claimed", token_hash=security.token_hash(token), runner=runner,
                    claimed_at=now(), attempts=Job.attempts + 1))
        if won.rowcount == 1:  # type: ignore[attr-defined]
            job = session.get(Job, job_id)
            assert job is not None
            session.refresh(job)
            if job.kind == "validate":
                version = session.get(AssignmentVersion, job.version_id)
                assert version is not None
                session.commit()
                a = version.assignment
                return JobOffer(job_id=job.id, token=token, validate_job=ValidateJob(
                    version_id=version.id, assignment=f"{a.course.slug}/{a.slug}",
                    bundle_sha256=version.bundle_sha256, queue=job.queue))  # type: ignore[arg-type]
            sub = session.get(Submission, job.submission_id)
            assert sub is not None
            sub.status, sub.started_at = "running", now()
            session.commit()
            manifest = Manifest.model_validate(sub.version.manifest)
            return JobOffer(job_id=job.id, token=token, job=grade_job(sub, manifest))
    return None


def authorize(*, session: Session, job_id: int, token: str) -> Job:
    """The job this per-job secret was issued for (claimed, not yet finished)."""
    job = session.get(Job, job_id)
    if job is None:
        raise NotFound("no such job")
    if job.token_hash is None or not security.same_secret(job.token_hash,
                                                          security.token_hash(token)):
        raise Forbidden("this token is not valid for this job")
    return job


def record(*, session: Session, job: Job, outcome: JobOutcome, max_attempts: int) -> None:
    """Store a runner's outcome once; a redelivered result changes nothing."""
    if job.state == "done":
        return
    if job.kind == "validate":
        _record_validation(session=session, job=job, outcome=outcome, max_attempts=max_attempts)
        return
    sub = session.get(Submission, job.submission_id)
    assert sub is not None
    if outcome.report is None:
        _platform_failure(session=session, job=job, sub=sub, max_attempts=max_attempts,
                          reason=outcome.platform_error or "no report")
        return
    store_report(session=session, sub=sub, report=outcome.report)
    job.state, job.token_hash = "done", None
    session.flush()


def _record_validation(*, session: Session, job: Job, outcome: JobOutcome,
                       max_attempts: int) -> None:
    version = session.get(AssignmentVersion, job.version_id)
    assert version is not None
    if outcome.checks is None:
        if job.attempts < max_attempts:
            job.state, job.token_hash, job.runner = "queued", None, None
            return
        version.status = "error"
        version.checks = [{"name": "platform", "ok": False, "skipped": None,
                           "problems": [_text(outcome.platform_error or "no result")]}]
    else:
        version.status = "ready" if all(c.ok for c in outcome.checks) else "invalid"
        version.checks = [{**c.model_dump(), "problems": [_text(p) for p in c.problems]}
                          for c in outcome.checks]
    job.state, job.token_hash = "done", None
    session.flush()


def _platform_failure(*, session: Session, job: Job, sub: Submission, max_attempts: int,
                      reason: str) -> None:
    sub.counts_for_quota = False  # never charged to the student
    if job.attempts < max_attempts:
        job.state, job.token_hash, job.runner = "queued", None, None
        sub.status = "queued"
    else:
        job.state, job.token_hash = "done", None
        sub.status, sub.verdict, sub.finished_at = "error", PLATFORM_ERROR, now()
    session.flush()


def store_report(*, session: Session, sub: Submission, report: GradeReport) -> GradeReportRow:
    """One report per submission (a regrade replaces it), with its tests and scaling points."""
    old = session.scalar(select(GradeReportRow).where(GradeReportRow.submission_id == sub.id))
    if old is not None:
        session.delete(old)
        session.flush()
    score = report.score
    a = sub.assignment
    if sub.late and a.late_policy == "penalty":
        score = round(score * (1 - a.late_penalty), 2)
    row = GradeReportRow(
        submission_id=sub.id, verdict=report.verdict.value, score=score,
        max_score=report.max_score,
        speedup_median=report.speedup.median if report.speedup else None,
        speedup_ci_low=report.speedup.ci_low if report.speedup else None,
        speedup_ci_high=report.speedup.ci_high if report.speedup else None,
        serial_fraction=report.serial_fraction, report=report.model_dump(mode="json"))
    session.add(row)
    session.flush()
    session.add_all([TestResultRow(report_id=row.id, name=_text(t.name)[:300],
                                   outcome=t.outcome.value, verdict=t.verdict.value,
                                   message=_text(t.message), hidden=t.hidden, weight=t.weight)
                     for t in report.tests])
    session.add_all([ScalingPointRow(report_id=row.id, workers=p.workers, speedup=p.speedup,
                                     efficiency=p.efficiency, ci_low=p.ci_low, ci_high=p.ci_high,
                                     karp_flatt=p.karp_flatt) for p in report.scaling])
    fault = report.verdict.fault
    sub.status = "graded" if fault != "platform" else "error"
    sub.verdict, sub.score, sub.finished_at = report.verdict.value, score, now()
    if fault != "student":
        sub.counts_for_quota = False
    return row


def _text(value: str) -> str:
    """Text a database column can hold: PostgreSQL refuses NUL (program output can carry one)."""
    return value.replace("\x00", "\ufffd")


def reap(*, session: Session, timeout_s: int, max_attempts: int) -> int:
    """Re-queue (or fail) jobs claimed longer ago than `timeout_s`; returns how many."""
    cutoff = now() - timedelta(seconds=timeout_s)
    stuck = session.scalars(select(Job).where(Job.state == "claimed", Job.claimed_at < cutoff))
    n = 0
    for job in stuck:
        if job.kind == "validate":
            _record_validation(session=session, job=job, max_attempts=max_attempts,
                               outcome=JobOutcome(platform_error="the runner timed out"))
        else:
            sub = session.get(Submission, job.submission_id)
            assert sub is not None
            _platform_failure(session=session, job=job, sub=sub, max_attempts=max_attempts,
                              reason="runner timed out")
        n += 1
    return n


def requeue(*, session: Session, submission: Submission) -> Job:
    """A new job for an existing submission (regrade onto the assignment's current version).

    Its pending jobs are superseded first: their tokens stop working, so a runner still busy with
    one cannot record a second grade.
    """
    session.execute(update(Job).where(Job.submission_id == submission.id,
                                      Job.state.in_(("queued", "claimed")))
                    .values(state="superseded", token_hash=None))
    current = submission.assignment.current_version
    if current is not None:
        submission.version_id = current.id
        session.flush()
        session.refresh(submission)
    submission.status, submission.verdict, submission.score = "queued", None, None
    return enqueue(session=session, submission=submission)


def depth(*, session: Session) -> dict[str, int]:
    from sqlalchemy import func

    rows = session.execute(select(Job.queue, func.count()).where(Job.state == "queued")
                           .group_by(Job.queue))
    return {q: int(n) for q, n in rows}
