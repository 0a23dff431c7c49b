"""Each job kind once: what a runner is offered for it, the files it may fetch, what its outcome
does, and what a hand-back undoes. The claim (claims.py), the outcome, reap and hand-back
(outcomes.py) and the runner's routes (api/runner.py) look the kind up in `KINDS`; a new kind is
one entry here.

- `grade`: a student's submission, graded live;
- `final`: one turn of a final run (services/grades/finals.py), a submission timed again;
- `validate`: a package version's checks;
- `similarity`: an instructor's comparison of the class's submissions;
- `practice`: a student's practice run (services/intake/practice.py), the public tests only,
  never graded.

A runner's outcome is recorded by its kind's `record`; a job taken back from its runner (silent,
past its limit, its credential revoked) is recorded the same way, as a platform error with the
reason: queued again until its last attempt, then failed on the platform's side, never charged
to a student.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from runners.protocol import (
    GradeJob,
    JobOutcome,
    Manifest,
    SimilarityJob,
    ValidateJob,
)
from server.metrics import GRADING_LATENCY
from server.models import (
    AssignmentVersion,
    FinalTurn,
    Job,
    PracticeRun,
    SimilarityRun,
    Submission,
    aware,
    now,
)
from server.services.grades import finals, grading, reference
from server.services.packages.assignments import bundle, safe_members
from server.services.people import teams
from server.services.records import artifacts, jobs
from server.services.records.errors import NotFound

PLATFORM_ERROR = "platform_error"

Offer = dict[str, Any]
"""What a claim hands the runner besides the job's id and secret: JobOffer's fields."""


@dataclass(frozen=True)
class Kind:
    offer: Callable[[Session, Job], Offer]
    """The claimed job as the runner is told it (the caller commits)."""
    bundle: Callable[[Session, Job], str]
    """The sha256 of the package bundle the job runs."""
    submission: Callable[[Session, Job, Path], bytes]
    """The job's submission archive (a similarity job's: every compared submission's files)."""
    record: Callable[[Session, Job, JobOutcome, int], None]
    """Store the runner's outcome (or, with a platform error, a job taken back), given the
    most attempts a job has."""
    handed_back: Callable[[Session, Job], None]
    """The runner gave the job back unfinished: what its claim had changed, undone."""


def done(job: Job) -> None:
    job.state, job.token_hash, job.finished_at = "done", None, now()


def queued_again(session: Session, job: Job) -> None:
    job.state, job.token_hash, job.runner, job.runner_key_hash = "queued", None, None, None
    jobs.publish(session, job)


def retried(session: Session, job: Job, max_attempts: int) -> bool:
    """A job that came back without a result (the platform's failure): queued again while it
    has attempts left (True); else the caller records the failure."""
    if job.attempts >= max_attempts:
        return False
    queued_again(session, job)
    return True


# grade: a student's submission, graded live ------------------------------------------------


def grade_job(session: Session, submission: Submission, job: Job) -> GradeJob:
    """What a runner is told of a grading job: the submission, its package, what to expect."""
    return _code_job(job, submission.version, submission.id, submission.archive_sha256,
                     reference.speedup(session=session, version=submission.version)).model_copy(
        update={"profile": submission.assignment.graded_profiles})


def _code_job(job: Job, version: AssignmentVersion, code_id: int, archive_sha256: str,
              reference_speedup: float | None) -> GradeJob:
    """A job that runs a student's code (`code_id`: the submission's, a practice run's)."""
    a = version.assignment
    manifest = Manifest.model_validate(version.manifest)
    return GradeJob(submission_id=code_id, assignment=f"{a.course.slug}/{a.slug}",
                    assignment_version=version.version, bundle_sha256=version.bundle_sha256,
                    submission_sha256=archive_sha256, queue=manifest.resources.queue,
                    time_limit_s=job.time_limit_s, entry_file=manifest.entry.file,
                    reference_speedup=reference_speedup,
                    reference_test_seconds=reference_test_seconds(version))


def reference_test_seconds(version: AssignmentVersion) -> dict[str, float]:
    """The reference's seconds per test its validation measured ({}: none recorded)."""
    for check in version.checks or []:
        seconds = check.get("test_seconds")
        if check.get("name") == "reference passes" and isinstance(seconds, dict):
            return {str(k): float(v) for k, v in seconds.items()
                    if isinstance(v, int | float) and not isinstance(v, bool)}
    return {}


def _submission(session: Session, job: Job) -> Submission:
    """The submission a grading job or a final run's turn times."""
    turn = session.get(FinalTurn, job.turn_id) if job.kind == "final" else None
    sub = turn.submission if turn is not None else session.get(Submission, job.submission_id)
    assert sub is not None
    return sub


def _offer_grade(session: Session, job: Job) -> Offer:
    sub = _submission(session, job)
    sub.status, sub.started_at = "running", now()
    return {"job": grade_job(session, sub, job)}


def _record_grade(session: Session, job: Job, outcome: JobOutcome, max_attempts: int) -> None:
    sub = _submission(session, job)
    if outcome.report is None:
        sub.counts_for_quota = False  # never charged to the student
        if retried(session, job, max_attempts):
            sub.status = "queued"
        else:
            done(job)
            sub.status, sub.verdict, sub.finished_at = "error", PLATFORM_ERROR, now()
        session.flush()
        return
    grading.store_report(session=session, sub=sub, report=outcome.report)
    done(job)
    session.flush()
    GRADING_LATENCY.observe((now() - aware(sub.created_at)).total_seconds())


def _grade_handed_back(session: Session, job: Job) -> None:
    sub = session.get(Submission, job.submission_id)
    if sub is not None:
        sub.status, sub.started_at = "queued", None


def _bundle_of_submission(session: Session, job: Job) -> str:
    return _submission(session, job).version.bundle_sha256


def _archive_of_submission(session: Session, job: Job, root: Path) -> bytes:
    return artifacts.read(root=root, sha256=_submission(session, job).archive_sha256)


# final: a final run's turn ---------------------------------------------------------------


def _offer_final(session: Session, job: Job) -> Offer:
    assert job.runner is not None
    timed, share, fixed = finals.claimed(session=session, job=job, runner=job.runner)
    return {"job": grade_job(session, timed, job).model_copy(update={
        "timing_only": True, "timing_share": share, "reference_speedup": fixed})}


def _record_final(session: Session, job: Job, outcome: JobOutcome, max_attempts: int) -> None:
    """A turn's figure, or, failed on the platform's side, queued again until its last attempt
    (then the turn is left out of the student's median)."""
    if outcome.report is None and retried(session, job, max_attempts):
        finals.requeued(session=session, job=job)
        return
    done(job)
    finals.turn_ended(session=session, job=job, report=outcome.report,
                      error=outcome.platform_error)


def _final_handed_back(session: Session, job: Job) -> None:
    finals.requeued(session=session, job=job)


# validate: a package version's checks ------------------------------------------------------


def _version(session: Session, job: Job) -> AssignmentVersion:
    version = session.get(AssignmentVersion, job.version_id)
    if version is None:
        raise NotFound("the package version this validation checks is gone")
    return version


def _offer_validate(session: Session, job: Job) -> Offer:
    version = _version(session, job)
    a = version.assignment
    return {"validate_job": ValidateJob(
        version_id=version.id, assignment=f"{a.course.slug}/{a.slug}",
        bundle_sha256=version.bundle_sha256, queue=job.queue)}  # type: ignore[arg-type]


def _no_submission(session: Session, job: Job, root: Path) -> bytes:
    raise NotFound("a validation job has only a bundle")


def _record_validation(session: Session, job: Job, outcome: JobOutcome,
                       max_attempts: int) -> None:
    version = _version(session, job)
    if outcome.checks is None:
        if retried(session, job, max_attempts):
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
    done(job)
    session.flush()


def _nothing(session: Session, job: Job) -> None:
    return None


# similarity: an instructor's comparison of the class's submissions -------------------------


def _run(session: Session, job: Job) -> SimilarityRun:
    run = session.get(SimilarityRun, job.run_id)
    assert run is not None
    return run


def _offer_similarity(session: Session, job: Job) -> Offer:
    run = _run(session, job)
    run.status = "running"
    a = run.assignment
    return {"similarity_job": SimilarityJob(
        run_id=run.id, assignment=f"{a.course.slug}/{a.slug}",
        bundle_sha256=run.version.bundle_sha256, submission_ids=run.submission_ids,
        threshold=run.threshold, queue="cpu")}


def _compared(session: Session, job: Job, root: Path) -> bytes:
    """The run's submissions as one zip for the runner: each one's files under its id."""
    run = _run(session, job)
    files: dict[str, bytes] = {}
    for sub in session.scalars(select(Submission).where(Submission.id.in_(run.submission_ids))):
        for name, content in safe_members(artifacts.read(root=root,
                                                         sha256=sub.archive_sha256)).items():
            files[f"{sub.id}/{name}"] = content
    return bundle(files)


def _record_similarity(session: Session, job: Job, outcome: JobOutcome,
                       max_attempts: int) -> None:
    run = _run(session, job)
    if outcome.similarity is None:
        if retried(session, job, max_attempts):
            run.status = "queued"
            return
        run.status, run.error = "error", grading.storable(outcome.platform_error or "no result")
    else:
        # Only pairs of the run's own submissions are kept (a runner cannot name others), and
        # never two a student shares (a team's, one of them handed in after the other left).
        ids = set(run.submission_ids)
        by = teams.sharers_by_submission(session=session, ids=ids)
        result = outcome.similarity.model_copy(update={"pairs": [
            p for p in outcome.similarity.pairs
            if {p.a, p.b} <= ids and p.a != p.b and not by[p.a] & by[p.b]]})
        run.status, run.result = "done", result.model_dump(mode="json")
    run.finished_at = now()
    done(job)
    session.flush()


def _similarity_handed_back(session: Session, job: Job) -> None:
    run = session.get(SimilarityRun, job.run_id)
    if run is not None:
        run.status = "queued"


# practice: a student's file on the grading hardware, never graded ---------------------------


def _practice(session: Session, job: Job) -> PracticeRun:
    run = session.get(PracticeRun, job.practice_id)
    assert run is not None
    return run


def _offer_practice(session: Session, job: Job) -> Offer:
    run = _practice(session, job)
    run.status, run.started_at = "running", now()
    return {"job": _code_job(job, run.version, run.id, run.archive_sha256, None).model_copy(
        update={"queue": job.queue, "practice": "timed" if run.timed else "tests",
                "profile": run.profiled})}


def _record_practice(session: Session, job: Job, outcome: JobOutcome, max_attempts: int) -> None:
    """The run's report, kept on the run alone (never a grade), as a practice run's: marked,
    without points, and without any hidden test's result should one come back."""
    run = _practice(session, job)
    run.attempts = job.attempts
    if outcome.report is None:
        if retried(session, job, max_attempts):
            run.status = "queued"
            return
        run.status, run.error = "error", grading.storable(outcome.platform_error or "no report")
    else:
        report = outcome.report
        report = report.model_copy(update={
            "practice": True, "score": 0.0, "test_points": 0.0, "performance_points": 0.0,
            "tests": [t for t in report.tests if not t.hidden]})
        run.status, run.verdict = "done", report.verdict.value
        run.report = report.model_dump(mode="json")
    run.finished_at = now()
    done(job)
    session.flush()


def _practice_handed_back(session: Session, job: Job) -> None:
    run = session.get(PracticeRun, job.practice_id)
    if run is not None:
        run.status, run.started_at = "queued", None


KINDS: dict[str, Kind] = {
    "practice": Kind(offer=_offer_practice,
                     bundle=lambda s, job: _practice(s, job).version.bundle_sha256,
                     submission=lambda s, job, root: artifacts.read(
                         root=root, sha256=_practice(s, job).archive_sha256),
                     record=_record_practice, handed_back=_practice_handed_back),
    "grade": Kind(offer=_offer_grade, bundle=_bundle_of_submission,
                  submission=_archive_of_submission, record=_record_grade,
                  handed_back=_grade_handed_back),
    "final": Kind(offer=_offer_final, bundle=_bundle_of_submission,
                  submission=_archive_of_submission, record=_record_final,
                  handed_back=_final_handed_back),
    "validate": Kind(offer=_offer_validate, bundle=lambda s, job: _version(s, job).bundle_sha256,
                     submission=_no_submission, record=_record_validation,
                     handed_back=_nothing),
    "similarity": Kind(offer=_offer_similarity,
                       bundle=lambda s, job: _run(s, job).version.bundle_sha256,
                       submission=_compared, record=_record_similarity,
                       handed_back=_similarity_handed_back),
}
