"""Practice runs: a student's file on the grading hardware, never graded.

The runner runs the package's public tests only (runners/grading/practice.py), with `timed` one
short timing at the top worker count. Its report is stored here, on the practice run, never as
a grade: nothing that reads submissions (the board, grades, the graded quota, statistics, a
final run, exports, the LMS) can see one, and no practice run becomes a grade without a graded
submission of its own.

Limits: each student's runs per hour and per day (the assignment's, else `PER_HOUR`,
`PER_DAY`), counted under the student's own row lock as the graded quota is, so twenty requests
at once take no more than the limit; staff may pause practice until a time (before a deadline).
Order: practice jobs wait behind every graded job (`PRACTICE_PRIORITY`, and the claim takes a
practice job only where no other job of its priority waits).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from runners.protocol import LOWEST_PRIORITY
from server.models import (
    Assignment,
    AuditLog,
    GradeReportRow,
    Job,
    PracticeRun,
    Submission,
    User,
    aware,
    now,
)
from server.services.fleet import routing
from server.services.intake.submissions import Intake, check_files
from server.services.packages.assignments import bundle, manifest_of
from server.services.people import courses, users
from server.services.records import artifacts, jobs
from server.services.records.errors import Conflict, Forbidden, NotFound, QuotaExceeded

PER_HOUR = 6
"""A student's practice runs per hour of an assignment, unless its instructor set another."""
PER_DAY = 30
"""And per day."""
COST_OF_LAST = 20
"""A graded profile's cost is the median of the assignment's last this many gradings'."""
PRACTICE_PRIORITY = LOWEST_PRIORITY
"""Behind every graded job (the claim orders practice after the rest of its priority)."""


def limits(assignment: Assignment) -> tuple[int, int]:
    """Runs per hour and per day a student of `assignment` may start."""
    return (assignment.practice_per_hour if assignment.practice_per_hour is not None
            else PER_HOUR,
            assignment.practice_per_day if assignment.practice_per_day is not None else PER_DAY)


def _next_allowed(session: Session, user: User, assignment: Assignment) -> datetime | None:
    """When the student may start their next run (None: now), by the hour's and day's limits."""
    per_hour, per_day = limits(assignment)
    at = now()
    soonest = None
    for window, most in ((timedelta(hours=1), per_hour), (timedelta(days=1), per_day)):
        started = list(session.scalars(
            select(PracticeRun.created_at).where(
                PracticeRun.user_id == user.id, PracticeRun.assignment_id == assignment.id,
                PracticeRun.created_at >= at - window)
            .order_by(PracticeRun.created_at.desc()).limit(max(most, 1))))
        if len(started) >= most:
            # The oldest of the last `most` runs leaves the window first.
            free = aware(started[-1]) + window if started else at
            soonest = free if soonest is None else max(soonest, free)
    return soonest


def start(*, session: Session, user: User, assignment: Assignment, role: str | None,
          uploads: list[tuple[str, bytes]], timed: bool, intake: Intake,
          profiled: bool = False) -> tuple[PracticeRun, Job]:
    """Check, store and queue a practice run in the caller's transaction (refused: nothing
    stored)."""
    if role is None:
        raise Forbidden("you are not enrolled in this course")
    version = assignment.current_version
    assert version is not None
    if version.status != "ready":
        raise Conflict("this assignment's package is not checked yet: practice runs start once "
                       "it takes submissions")
    staff = courses.is_staff(role)
    if 0 in limits(assignment) and not staff:
        raise Conflict("practice runs are turned off for this assignment (its instructor set "
                       "the limit to 0); you can still submit")
    paused = assignment.practice_paused_until
    if paused is not None and aware(paused) > now() and not staff:
        raise Conflict(f"practice runs are paused until {aware(paused):%Y-%m-%d %H:%M} UTC "
                       "(your course's staff paused them); you can still submit")
    if timed and not assignment.practice_timing:
        raise Forbidden("this assignment's practice runs are not timed (its instructor turned "
                        "the timing off): ask for the public tests alone")
    if profiled and not assignment.practice_profiles:
        raise Forbidden("this assignment's practice runs are not profiled (its instructor turned "
                        "profiles off)")
    manifest = manifest_of(assignment)
    files = check_files(uploads, manifest=manifest, max_bytes=intake.max_bytes,
                        max_unzipped=intake.max_unzipped)
    if not users.hold(session=session, user_id=user.id):
        raise Conflict("this account was just linked to another one: sign in with that account "
                       "and try again")
    if not staff and (free := _next_allowed(session, user, assignment)) is not None:
        per_hour, per_day = limits(assignment)
        raise QuotaExceeded(f"practice limit reached ({per_hour} per hour, {per_day} per day): "
                            f"your next practice run is allowed from {free:%Y-%m-%d %H:%M:%S} "
                            "UTC")
    sha = artifacts.store(session=session, root=intake.artifacts_root, data=bundle(files),
                          kind="submission")
    run = PracticeRun(user_id=user.id, assignment_id=assignment.id, version_id=version.id,
                      archive_sha256=sha, filenames=sorted(files), timed=timed,
                      profiled=profiled)
    session.add(run)
    session.flush()
    queue = routing.queue_for(session=session, manifest=manifest.model_dump(),
                              queue=manifest.resources.queue, live_s=intake.live_s)
    job = Job(kind="practice", practice_id=run.id, queue=queue, priority=PRACTICE_PRIORITY,
              time_limit_s=jobs.time_limit_s(manifest.resources), published_at=now())
    session.add(job)
    session.flush()
    jobs.publish(session, job, stamp=False)
    return run, job


def get_visible(*, session: Session, user: User, run_id: int) -> PracticeRun:
    """A practice run its student, or their course's staff, may read."""
    run = session.get(PracticeRun, run_id)
    if run is None:
        raise NotFound("no such practice run")
    if run.user_id != user.id and not courses.is_staff(
            courses.role(session=session, user=user, course=run.assignment.course)):
        raise NotFound("no such practice run")
    return run


def history(*, session: Session, assignment: Assignment, user: User | None = None,
            limit: int = 200) -> list[PracticeRun]:
    """Practice runs of an assignment, newest first: `user`'s own, or everyone's (staff)."""
    q = select(PracticeRun).where(PracticeRun.assignment_id == assignment.id)
    if user is not None:
        q = q.where(PracticeRun.user_id == user.id)
    return list(session.scalars(q.order_by(PracticeRun.id.desc()).limit(limit)))


def pause(*, session: Session, assignment: Assignment, actor: User, role: str | None,
          until: datetime | None) -> None:
    """No student's practice run is taken until `until` (None: again now); staff only."""
    if not courses.is_staff(role):
        raise Forbidden("only the course's staff pause practice runs")
    assignment.practice_paused_until = until
    session.add(AuditLog(actor_id=actor.id, action="practice.paused",
                         target=f"{assignment.course.slug}/{assignment.slug}",
                         detail={"until": until.isoformat() if until else None}))
    session.flush()


def graded_profile_cost(*, session: Session, assignment: Assignment) -> float | None:
    """The median runner seconds of the last graded gradings' profiles (`graded_profiles`: what
    opting in costs), None where none was profiled."""
    reports = session.scalars(
        select(GradeReportRow.report).join(Submission, Submission.id == GradeReportRow.submission_id)
        .where(Submission.assignment_id == assignment.id).order_by(GradeReportRow.id.desc())
        .limit(COST_OF_LAST))
    costs = sorted(float(c) for r in reports if isinstance(r, dict)
                   and isinstance(p := r.get("profile"), dict)
                   and isinstance(c := p.get("cost_s"), int | float))
    return costs[len(costs) // 2] if costs else None
