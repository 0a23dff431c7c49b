"""Jobs as the database holds them: enqueue, claim, lease, record, re-queue, cancel, sweep.

A job is ids and data (protocol.GradeJob). Enqueueing puts a message (the job id) in the
session's outbox; the dispatcher publishes it once the transaction commits. A runner that gets
the message claims the job over HTTP with its credential (compare-and-set, so a redelivered
message is refused) and receives a per-job secret for the job's bundle, archive, heartbeats and
result. Recording a result is idempotent; the database, not the broker, says what is done.

A job answers only the runner process that claimed it. Every runner process makes a random key
at its start and sends it with the claim and with every request about the job; the claim stores
its hash beside the per-job secret's. `authorize` wants all three: the runner's credential says
"this runner" (services/runners.py: a credential's runner claims only under its own name and on
its own queues), the key says "this process of it", the per-job secret says "this attempt". So
another runner cannot fetch, renew or report a job someone else claimed, even with its per-job
secret (a log line, a proxy). What the shared fleet token cannot stop: its holder claims queued
jobs of any queue under a name nobody holds (see docs/security.md).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from runners.protocol import (
    CORES_TOLERANCE,
    LOWEST_PRIORITY,
    QUEUES,
    GradeJob,
    GradeReport,
    JobOffer,
    JobOutcome,
    Manifest,
    RunnerHello,
    SimilarityJob,
    ValidateJob,
    credited_speedup,
    performance_share,
)
from server import security
from server.dispatch import Message, outbox
from server.metrics import GRADING_LATENCY
from server.models import (
    Assignment,
    AssignmentVersion,
    GradeReportRow,
    Job,
    Runner,
    ScalingPointRow,
    SimilarityRun,
    Submission,
    TestResultRow,
    aware,
    now,
)
from server.services import leaderboard
from server.services.errors import Conflict, Forbidden, NotFound

PLATFORM_ERROR = "platform_error"


def _publish(session: Session, job: Job, *, stamp: bool = True) -> None:
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


def enqueue(*, session: Session, submission: Submission, priority: int | None = None,
            manifest: Manifest | None = None) -> Job:
    """A queued job for a submission (routed by the assignment's resources), published to the
    broker once the caller's transaction commits; `manifest`: the version's, already parsed."""
    manifest = manifest or Manifest.model_validate(submission.version.manifest)
    if priority is None:
        priority = fair_priority(session=session, user_id=submission.user_id)
    job = Job(submission_id=submission.id, queue=manifest.resources.queue, priority=priority,
              time_limit_s=manifest.resources.wall_seconds * 40, published_at=now())
    session.add(job)
    session.flush()
    _publish(session, job, stamp=False)
    return job


def enqueue_validation(*, session: Session, version: AssignmentVersion, queue: str) -> Job:
    """A job that runs the engine's validate on a runner serving the package's queue."""
    manifest = Manifest.model_validate(version.manifest)
    job = Job(kind="validate", version_id=version.id, queue=queue,
              time_limit_s=manifest.resources.wall_seconds * 100)
    session.add(job)
    session.flush()
    _publish(session, job)
    return job


def enqueue_similarity(*, session: Session, run: SimilarityRun) -> Job:
    """A job that compares a similarity run's submissions on a CPU runner (text only)."""
    job = Job(kind="similarity", run_id=run.id, queue="cpu", time_limit_s=3600)
    session.add(job)
    session.flush()
    _publish(session, job)
    return job


def grade_job(submission: Submission, job: Job) -> GradeJob:
    a = submission.assignment
    manifest = Manifest.model_validate(submission.version.manifest)
    return GradeJob(submission_id=submission.id, assignment=f"{a.course.slug}/{a.slug}",
                    assignment_version=submission.version.version,
                    bundle_sha256=submission.version.bundle_sha256,
                    submission_sha256=submission.archive_sha256, queue=manifest.resources.queue,
                    time_limit_s=job.time_limit_s, entry_file=manifest.entry.file,
                    reference_speedup=reference_speedup(submission.version),
                    reference_test_seconds=reference_test_seconds(submission.version))


def reference_speedup(version: AssignmentVersion) -> float | None:
    """The reference's speedup its validation measured (GPU runners measure it), if any."""
    for check in version.checks or []:
        if check.get("figure") is not None and str(check.get("name", "")).startswith(
                "reference speeds up"):
            return float(check["figure"])
    return None


def reference_test_seconds(version: AssignmentVersion) -> dict[str, float]:
    """The reference's seconds per test its validation measured ({}: none recorded)."""
    for check in version.checks or []:
        seconds = check.get("test_seconds")
        if check.get("name") == "reference passes" and isinstance(seconds, dict):
            return {str(k): float(v) for k, v in seconds.items()
                    if isinstance(v, int | float) and not isinstance(v, bool)}
    return {}


def claim(*, session: Session, job_id: int, runner: str, runner_key: str,
          queues: Collection[str] = QUEUES) -> JobOffer:
    """Claim one queued job for `runner`, bound to its key (compare-and-set); Conflict if it is
    not claimable, Forbidden (the job left queued) if its queue is not one of `queues`."""
    queue = session.scalar(select(Job.queue).where(Job.id == job_id))
    if queue is None:
        raise NotFound("no such job")
    if queue not in queues:
        raise Forbidden(f"runner {runner}'s credential does not serve the {queue} queue (it "
                        f"serves {', '.join(sorted(queues))})")
    token = security.new_token()
    won = session.execute(
        update(Job).where(Job.id == job_id, Job.state == "queued")
        .values(state="claimed", token_hash=security.token_hash(token), runner=runner,
                runner_key_hash=security.token_hash(runner_key),
                claimed_at=now(), heartbeat_at=now(), attempts=Job.attempts + 1))
    job = session.get(Job, job_id)
    if job is None:
        raise NotFound("no such job")
    if won.rowcount != 1:  # type: ignore[attr-defined]
        session.rollback()
        raise Conflict(f"job {job_id} is {job.state}, not queued")
    session.refresh(job)
    session.execute(update(Runner).where(Runner.name == runner).values(current_job_id=job.id))
    if job.kind == "similarity":
        run = session.get(SimilarityRun, job.run_id)
        assert run is not None
        run.status = "running"
        session.commit()
        a = run.assignment
        return JobOffer(job_id=job.id, token=token, similarity_job=SimilarityJob(
            run_id=run.id, assignment=f"{a.course.slug}/{a.slug}",
            bundle_sha256=run.version.bundle_sha256, submission_ids=run.submission_ids,
            threshold=run.threshold, queue="cpu"))
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
    return JobOffer(job_id=job.id, token=token, job=grade_job(sub, job))


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


def record(*, session: Session, job: Job, outcome: JobOutcome, max_attempts: int) -> None:
    """Store a runner's outcome once; a redelivered result changes nothing."""
    if job.state == "done":
        return
    if job.runner is not None:
        session.execute(update(Runner).where(Runner.name == job.runner, Runner.current_job_id ==
                                             job.id).values(current_job_id=None))
    if job.kind == "validate":
        _record_validation(session=session, job=job, outcome=outcome, max_attempts=max_attempts)
        return
    if job.kind == "similarity":
        _record_similarity(session=session, job=job, outcome=outcome, max_attempts=max_attempts)
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
    GRADING_LATENCY.observe((now() - aware(sub.created_at)).total_seconds())


def _record_validation(*, session: Session, job: Job, outcome: JobOutcome,
                       max_attempts: int) -> None:
    version = session.get(AssignmentVersion, job.version_id)
    assert version is not None
    if outcome.checks is None:
        if job.attempts < max_attempts:
            job.state, job.token_hash, job.runner, job.runner_key_hash = "queued", None, None, None
            _publish(session, job)
            return
        version.status = "error"
        version.checks = [{"name": "platform", "ok": False, "skipped": None,
                           "problems": [_text(outcome.platform_error or "no result")]}]
    else:
        version.status = "ready" if all(c.ok for c in outcome.checks) else "invalid"
        a = version.assignment
        if version.status == "ready" and (a.current_version_id or 0) < version.id:
            a.current_version_id, a.title = version.id, version.manifest["title"]
        version.checks = [{**c.model_dump(), "problems": [_text(p) for p in c.problems]}
                          for c in outcome.checks]
    job.state, job.token_hash = "done", None
    session.flush()


def _record_similarity(*, session: Session, job: Job, outcome: JobOutcome,
                       max_attempts: int) -> None:
    run = session.get(SimilarityRun, job.run_id)
    assert run is not None
    if outcome.similarity is None:
        if job.attempts < max_attempts:
            job.state, job.token_hash, job.runner, job.runner_key_hash = "queued", None, None, None
            run.status = "queued"
            _publish(session, job)
            return
        run.status, run.error = "error", _text(outcome.platform_error or "no result")
    else:
        # Only pairs of the run's own submissions are kept (a runner cannot name others).
        ids = set(run.submission_ids)
        result = outcome.similarity.model_copy(update={"pairs": [
            p for p in outcome.similarity.pairs if {p.a, p.b} <= ids and p.a != p.b]})
        run.status, run.result = "done", result.model_dump(mode="json")
    run.finished_at = now()
    job.state, job.token_hash = "done", None
    session.flush()


def _platform_failure(*, session: Session, job: Job, sub: Submission, max_attempts: int,
                      reason: str) -> None:
    sub.counts_for_quota = False  # never charged to the student
    if job.attempts < max_attempts:
        job.state, job.token_hash, job.runner, job.runner_key_hash = "queued", None, None, None
        sub.status = "queued"
        _publish(session, job)
    else:
        job.state, job.token_hash = "done", None
        sub.status, sub.verdict, sub.finished_at = "error", PLATFORM_ERROR, now()
    session.flush()


def store_report(*, session: Session, sub: Submission, report: GradeReport) -> GradeReportRow:
    """One report per submission (a regrade replaces it), with its tests and scaling points.
    An instructor's review of a held or refused speedup carries over to a regrade that holds or
    refuses it again (the same code, judged already)."""
    old = session.scalar(select(GradeReportRow).where(GradeReportRow.submission_id == sub.id))
    review = None
    if old is not None:
        if report.credit is not None and report.credit.status in ("held", "refused"):
            review = old.review
        session.delete(old)
        session.flush()
    score = course_score(sub=sub, report=report, review=review)
    row = GradeReportRow(
        submission_id=sub.id, verdict=report.verdict.value, score=score,
        max_score=report.max_score,
        speedup_median=report.speedup.median if report.speedup else None,
        speedup_ci_low=report.speedup.ci_low if report.speedup else None,
        speedup_ci_high=report.speedup.ci_high if report.speedup else None,
        serial_fraction=report.serial_fraction, report=report.model_dump(mode="json"),
        credit_status=report.credit.status if report.credit else None, review=review,
        timing_interfered=report.speedup is not None and report.speedup.interference is not None
        and report.speedup.interference.unreliable,
        credited_speedup=None if report.speedup is None else ranked_speedup(
            sub, credited_speedup(report.credit, report.speedup.median, review=review), review))
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
    # Only what the student caused counts (a retried platform failure that then graded does).
    sub.counts_for_quota = fault == "student"
    session.flush()
    leaderboard.refresh(session=session, assignment_id=sub.assignment_id, user_id=sub.user_id)
    return row


def ranked_speedup(sub: Submission, earned: float | None, review: str | None) -> float | None:
    """What the leaderboard ranks by: the credited speedup; a granted one no higher than the
    package's cores can give (a granted 60× NumPy-in-a-pool is not 30 times a perfect parallel
    sum)."""
    if earned is None or review != "granted":
        return earned
    res = Manifest.model_validate(sub.version.manifest).resources
    return earned if res.kind == "gpu" else min(earned, res.cores * (1 + CORES_TOLERANCE))


def course_score(*, sub: Submission, report: GradeReport, review: str | None = None) -> float:
    """The report's score under the assignment's own scoring curve and late policy; `review`:
    an instructor granted ("granted") or refused ("refused") a held or refused speedup."""
    a, score = sub.assignment, report.score
    if report.speedup is not None and (a.speedup_min or a.speedup_full or review):
        scoring = Manifest.model_validate(sub.version.manifest).scoring
        weak = report.weak_scaling[-1].efficiency if report.weak_scaling else None
        earned = credited_speedup(report.credit, report.speedup.median, review=review)
        share = 0.0 if earned is None or report.verdict.value != "passed" else performance_share(
            scoring, earned, weak, speedup_min=a.speedup_min, speedup_full=a.speedup_full)
        score = report.test_points + scoring.performance_points * share
    if sub.late and a.late_policy == "penalty":
        score *= 1 - a.late_penalty
    return round(score, 2)


def rescore(*, session: Session, assignment: Assignment) -> int:
    """Apply a changed scoring curve to every stored grade of the assignment (no regrading:
    the measured speedups stay what they were)."""
    rows = session.execute(select(GradeReportRow, Submission).join(
        Submission, GradeReportRow.submission_id == Submission.id).where(
        Submission.assignment_id == assignment.id)).all()
    for row, sub in rows:
        score = course_score(sub=sub, report=GradeReport.model_validate(row.report),
                             review=row.review)
        row.score = sub.score = score
    session.flush()
    leaderboard.rebuild(session=session, assignment_id=assignment.id)
    return len(rows)


def _text(value: str) -> str:
    """Text a database column can hold: PostgreSQL refuses NUL (program output can carry one)."""
    return value.replace("\x00", "\ufffd")


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
    if job.runner is not None:
        session.execute(update(Runner).where(Runner.name == job.runner, Runner.current_job_id ==
                                             job.id).values(current_job_id=None))
    if job.kind == "validate":
        _record_validation(session=session, job=job, max_attempts=max_attempts,
                           outcome=JobOutcome(platform_error=reason))
    elif job.kind == "similarity":
        _record_similarity(session=session, job=job, max_attempts=max_attempts,
                           outcome=JobOutcome(platform_error=reason))
    else:
        sub = session.get(Submission, job.submission_id)
        assert sub is not None
        _platform_failure(session=session, job=job, sub=sub, max_attempts=max_attempts,
                          reason=reason)


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
                _publish(session, job)
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


def hello(*, session: Session, runner: RunnerHello) -> None:
    """Record (or refresh) a runner's announcement: its capabilities and that it is alive
    (services/runners.py decides who may say it)."""
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


def all_runners(*, session: Session) -> list[Runner]:
    return list(session.scalars(select(Runner).order_by(Runner.name)))


def live_runners(*, session: Session, live_s: int) -> list[Runner]:
    cutoff = now() - timedelta(seconds=live_s)
    return [r for r in all_runners(session=session) if aware(r.last_seen) >= cutoff]


@dataclass(frozen=True)
class QueueState:
    name: str
    queued: int
    claimed: int
    broker: int | None  # messages in the broker; None when it is unreachable
    live: int  # live runners serving it


def fleet(*, session: Session, live_s: int, broker_depth: dict[str, int] | None
          ) -> tuple[list[tuple[Runner, bool]], list[QueueState]]:
    """Every runner with whether it is live, and the state of each queue."""
    live = {r.name for r in live_runners(session=session, live_s=live_s)}
    runners = [(r, r.name in live) for r in all_runners(session=session)]
    queues = [QueueState(name=q, queued=n["queued"], claimed=n["claimed"],
                         broker=None if broker_depth is None else broker_depth.get(q, 0),
                         live=sum(1 for r, up in runners if up and q in r.queues))
              for q, n in depth(session=session).items()]
    return runners, queues


WAITING = {"gpu": "waiting for a GPU runner", "mpi": "waiting for an MPI runner",
           "cpu": "waiting for a runner"}


def waiting_for(*, session: Session, queue: str, live_s: int) -> str | None:
    """Why a queued job is not moving, when no live runner serves its queue."""
    if any(queue in r.queues for r in live_runners(session=session, live_s=live_s)):
        return None
    return WAITING.get(queue, "waiting for a runner")
