"""Submissions: upload rules, storage, quota, lateness, and who may read what."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path, PurePosixPath

from sqlalchemy import func, select, tuple_
from sqlalchemy.orm import Session, selectinload

from runners.protocol import LOWEST_PRIORITY, Manifest, Verdict, check_relpath
from server.models import Assignment, AuditLog, GradeReportRow, Job, Submission, User, now
from server.services import MAX_ROW_ID
from server.services.fleet import readiness, routing
from server.services.fleet import state as fleet
from server.services.grades import extensions, grading, late_days
from server.services.packages.assignments import bundle, manifest_of, safe_members
from server.services.people import courses, teams, users
from server.services.records import artifacts, jobs
from server.services.records.errors import (
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    QuotaExceeded,
    TooLarge,
)
from server.settings import ServerSettings


def is_late(*, session: Session, assignment: Assignment, user: User) -> bool:
    """Whether this student's deadline (the assignment's, or their extension's) has passed."""
    deadline = extensions.deadline_for(session=session, assignment=assignment, user_id=user.id)
    return extensions.passed(deadline, now())


def allowed_names(manifest: Manifest) -> set[str]:
    return set(manifest.entry.allowed_files) | {manifest.entry.file}


def check_name(name: str) -> str:
    """`name` if it is a safe relative file name, else Invalid saying what is wrong with it."""
    try:
        return check_relpath(name)
    except ValueError as exc:
        # check_relpath names the file first; say it once, shortened (a name can be anything).
        shown = repr(name[:120] + ("…" if len(name) > 120 else ""))
        reason = str(exc).removeprefix(f"{name!r}: ")
        raise Invalid(f"{shown} is not a file this assignment takes: {reason}") from exc


def check_files(uploads: list[tuple[str, bytes]], *, manifest: Manifest, max_bytes: int,
                max_unzipped: int) -> dict[str, bytes]:
    """The files to grade, by name; every refusal says which file and why."""
    if not uploads:
        raise Invalid("no file uploaded")
    files: dict[str, bytes] = {}
    total = 0
    for name, content in uploads:
        total += len(content)
        if total > max_bytes:
            raise TooLarge(f"upload larger than {max_bytes} bytes")
        if name.lower().endswith(".zip"):
            files.update(safe_members(content, max_total=max_unzipped))
        else:
            files[name] = content
    allowed = allowed_names(manifest)
    single = len(uploads) == 1 and not uploads[0][0].lower().endswith(".zip")
    if single and len(allowed) == 1:  # one plain file (any name): graded as the entry file
        name, want = PurePosixPath(uploads[0][0]).name, PurePosixPath(manifest.entry.file).suffix
        if PurePosixPath(name).suffix.lower() != want.lower():
            raise Invalid(f"{name!r} is not a {want} file; upload {manifest.entry.file}")
        files = {manifest.entry.file: next(iter(files.values()))}
    for name, content in files.items():
        check_name(name)  # even a name the manifest allows: one stored before names were checked
        base = name.rsplit("/", 1)[-1]
        if name not in allowed:
            raise Invalid(f"{base!r} is not a file this assignment takes "
                          f"(allowed: {', '.join(sorted(allowed))})")
        if not content.strip():
            raise Invalid(f"{base!r} is empty")
        if b"\0" in content:
            raise Invalid(f"{base!r} is a binary file; upload Python source")
        try:
            content.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Invalid(f"{base!r} is not UTF-8 text") from exc
    if manifest.entry.file not in files:
        raise Invalid(f"the upload must include {manifest.entry.file!r}")
    return files


@dataclass(frozen=True)
class Intake:
    """What an upload is held to and where it goes, the same for the API and the pages: the
    artifacts folder, the most bytes per file and unzipped, and how recently a runner must have
    been heard from to count as live (what a refusal says of an assignment not open yet)."""

    artifacts_root: Path
    max_bytes: int
    max_unzipped: int
    live_s: int

    @classmethod
    def of(cls, settings: ServerSettings) -> Intake:
        return cls(artifacts_root=settings.artifacts_dir, max_bytes=settings.max_upload_bytes,
                   max_unzipped=settings.max_unzipped_bytes, live_s=settings.runner_live_s)


def create(*, session: Session, user: User, assignment: Assignment, role: str | None,
           uploads: list[tuple[str, bytes]], intake: Intake,
           spend_late_days: bool = False) -> tuple[Submission, Job]:
    """Check, store and queue an upload (the submission and its job) in the caller's
    transaction (`db.committing`, as every action: a refused upload stores nothing). A late
    upload the course's late days cover spends them once the student confirmed
    (`spend_late_days`; services/grades/late_days.py)."""
    if role is None:
        raise Forbidden("you are not enrolled in this course")
    version = assignment.current_version
    assert version is not None
    if version.status != "ready" and not courses.is_staff(role):
        raise Conflict(readiness.refusal(session=session, assignment=assignment,
                                         live_s=intake.live_s)
                       or "this assignment does not take submissions")
    manifest = manifest_of(assignment)
    files = check_files(uploads, manifest=manifest, max_bytes=intake.max_bytes,
                        max_unzipped=intake.max_unzipped)
    staff = courses.is_staff(role)
    late = is_late(session=session, assignment=assignment, user=user)
    if late and assignment.late_policy == "reject" and not staff and not \
            assignment.course.late_days:
        raise Forbidden("the deadline has passed; this assignment takes no late submissions")
    if not users.hold(session=session, user_id=user.id):
        raise Conflict("this account was just linked to another one: sign in with that account "
                       "and upload again")
    # Team work: the team's quota, under the team's lock (after the student's).
    team = teams.for_upload(session=session, user=user, assignment=assignment, staff=staff)
    days = 0
    if late and not staff and assignment.course.late_days:
        q = late_days.quote_now(session=session, assignment=assignment, user=user)
        if q.covered and q.extra and not spend_late_days:
            raise Conflict(f"{q.said}: confirm to spend them (spend_late_days)")
        if q.covered:
            late, days = False, q.needed
        elif assignment.late_policy == "reject":
            raise Forbidden(f"{q.said}, and this assignment takes no late submissions")
    window_start = now() - timedelta(seconds=assignment.quota_window_s)
    owner = (Submission.team_id == team.id if team is not None else
             (Submission.user_id == user.id) & Submission.team_id.is_(None))
    used = session.scalar(select(func.count()).select_from(Submission).where(
        owner, Submission.assignment_id == assignment.id,
        Submission.counts_for_quota.is_(True), Submission.created_at >= window_start)) or 0
    if not courses.is_staff(role) and used >= assignment.quota_count:
        n = assignment.quota_count
        raise QuotaExceeded(f"quota reached: {n} submission{'s' * (n != 1)} per "
                            f"{assignment.quota_window_s // 60} minutes")
    sha = artifacts.store(session=session, root=intake.artifacts_root, data=bundle(files),
                          kind="submission")
    assert assignment.current_version_id is not None
    sub = Submission(user_id=user.id, assignment_id=assignment.id,
                     team_id=team.id if team is not None else None,
                     version_id=assignment.current_version_id, archive_sha256=sha,
                     filenames=sorted(files), late=late, late_days=days)
    session.add(sub)
    session.flush()
    # One transaction: the job's message goes to the broker only after it commits (outbox).
    # A GPU task that can be simulated goes where a live runner serves it now (services/routing).
    job = jobs.enqueue(session=session, submission=sub, manifest=manifest, queue=routing.queue_for(
        session=session, manifest=manifest.model_dump(), queue=manifest.resources.queue,
        live_s=intake.live_s))
    return sub, job


def get_visible(*, session: Session, user: User, submission_id: int) -> Submission:
    """A submission its owner (its team's members of the moment it was made) or the course's
    staff (instructors, TAs) may read; others get 404."""
    if not 0 < submission_id <= MAX_ROW_ID:  # no such row, and the database would refuse the id
        raise NotFound("no such submission")
    sub = session.get(Submission, submission_id)
    if sub is None:
        raise NotFound("no such submission")
    if not teams.shares(session=session, user_id=user.id, submission_id=sub.id) and not courses.is_staff(
            courses.role(session=session, user=user, course=sub.assignment.course)):
        raise NotFound("no such submission")  # not 403: do not confirm it exists
    return sub


def mine(*, session: Session, user: User, assignment: Assignment | None = None) -> list[Submission]:
    """The submissions `user` shares (their own, their teams'), newest first."""
    q = select(Submission).where(teams.shared(user.id))
    if assignment is not None:
        q = q.where(Submission.assignment_id == assignment.id)
    return list(session.scalars(q.order_by(Submission.id.desc()).limit(200)))


def of_assignment(*, session: Session, assignment: Assignment) -> list[Submission]:
    """Every submission of the assignment, oldest first, their students read in one query."""
    return list(session.scalars(select(Submission).where(Submission.assignment_id == assignment.id)
                                .options(selectinload(Submission.user)).order_by(Submission.id)))


def latest_job(*, session: Session, submission: Submission) -> Job | None:
    return session.scalar(select(Job).where(Job.submission_id == submission.id)
                          .order_by(Job.id.desc()).limit(1))


def latest_jobs(*, session: Session, assignment: Assignment) -> dict[int, Job]:
    """Each submission's latest job (submission id -> job), in one query for the assignment."""
    latest = (select(func.max(Job.id)).join(Submission, Submission.id == Job.submission_id)
              .where(Submission.assignment_id == assignment.id).group_by(Job.submission_id))
    return {j.submission_id: j for j in session.scalars(select(Job).where(Job.id.in_(latest)))
            if j.submission_id is not None}


def queue_positions(*, session: Session, jobs: Iterable[Job]) -> dict[int, int]:
    """The queue position (as queue_position counts it) of each of these jobs that is queued:
    one query per queue, however many jobs and however long the queue."""
    wanted = {j.id: j.queue for j in jobs if j.state == "queued"}
    positions: dict[int, int] = {}
    for queue in set(wanted.values()):
        order = session.scalars(select(Job.id).where(Job.state == "queued", Job.queue == queue)
                                .order_by(Job.priority, Job.id))
        positions |= {job_id: i for i, job_id in enumerate(order, 1) if job_id in wanted}
    return positions


def queue_position(*, session: Session, job: Job) -> int:
    """1 for the next job its queue serves (the broker serves lower priorities first)."""
    # Over the index of queued jobs (ix_jobs_queued_order): one range of it.
    ahead = tuple_(Job.priority, Job.id) < tuple_(job.priority, job.id)
    return int(session.scalar(select(func.count()).select_from(Job).where(
        Job.state == "queued", Job.queue == job.queue, ahead)) or 0) + 1


@dataclass(frozen=True)
class Place:
    """Where a submission's latest job stands: its queue and, while it is queued, its position
    and what that queue waits for ('waiting for a GPU runner'; None: nothing)."""

    queue: str | None = None
    position: int | None = None
    waiting_for: str | None = None


def place(*, session: Session, submission: Submission, live_s: int, job: Job | None = None,
          position: int | None = None, waiting: dict[str, str | None] | None = None) -> Place:
    """The submission's `Place`, for the API and the pages alike. A caller listing many passes
    each one's latest `job` and `position` (read in one query each) and a `waiting` dict that
    keeps what each queue waits for once it is read."""
    job = job or latest_job(session=session, submission=submission)
    if job is None:
        return Place()
    if job.state != "queued":
        return Place(queue=job.queue)
    waiting = {} if waiting is None else waiting
    if job.queue not in waiting:
        waiting[job.queue] = fleet.waiting_for(session=session, queue=job.queue, live_s=live_s)
    return Place(queue=job.queue, waiting_for=waiting[job.queue],
                 position=position or queue_position(session=session, job=job))


def regrade(*, session: Session, actor: User, submission: Submission, role: str | None,
            low_priority: bool = False) -> None:
    """Grade again on the assignment's current version (the course's staff)."""
    if not courses.is_staff(role):
        raise Forbidden("only the course's instructors and TAs regrade")
    jobs.requeue(session=session, submission=submission,
                 priority=LOWEST_PRIORITY if low_priority else 0)
    session.add(AuditLog(actor_id=actor.id, action="submission.regrade", target=str(submission.id)))


def regrade_all(*, session: Session, actor: User, assignment: Assignment,
                role: str | None) -> int:
    """Queue every submission of the assignment, behind every student's own submissions."""
    if not courses.is_staff(role):
        raise Forbidden("only the course's instructors and TAs regrade")
    subs = of_assignment(session=session, assignment=assignment)
    for s in subs:
        jobs.requeue(session=session, submission=s, priority=LOWEST_PRIORITY)
    session.add(AuditLog(actor_id=actor.id, action="assignment.regrade_all",
                         target=f"{assignment.course.slug}/{assignment.slug}",
                         detail={"queued": len(subs)}))
    return len(subs)


def cancel(*, session: Session, actor: User, submission: Submission, role: str | None) -> None:
    """Stop a queued or running submission (its owner, or the course's staff).

    A cancelled submission never counts against the quota; a runner busy with it is told at its
    next heartbeat and its result is refused. A grading again of a graded submission (a regrade,
    or the platform timing it again) is the course's: only staff cancel it, and its previous
    grade then stands (a student who could cancel it would keep a grade the course replaced).
    """
    staff = courses.is_staff(role)
    if not staff and not teams.shares(session=session, user_id=actor.id,
                                      submission_id=submission.id):
        raise Forbidden("only its owner (its team) or the course's staff cancel a submission")
    if submission.status not in ("queued", "running"):
        raise Conflict(f"the submission is already {submission.status}")
    previous = session.scalar(select(GradeReportRow.verdict).where(
        GradeReportRow.submission_id == submission.id))
    graded = previous is not None
    if graded and not staff:
        raise Forbidden("this submission is being graded again by the course; only its staff "
                        "can cancel that, and its previous grade stands meanwhile")
    jobs.supersede(session=session, submission=submission, state="cancelled")
    if previous is not None:  # as the stored grade left it
        submission.status = grading.status_of(Verdict(previous))
    else:
        submission.status, submission.finished_at = "cancelled", now()
        submission.counts_for_quota = False
    if actor.id != submission.user_id:
        session.add(AuditLog(actor_id=actor.id, action="submission.cancel",
                             target=str(submission.id)))


def files_of(*, submission: Submission, artifacts_root: Path) -> bytes:
    return artifacts.read(root=artifacts_root, sha256=submission.archive_sha256)
