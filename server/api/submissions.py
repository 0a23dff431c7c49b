"""Submissions: upload, status, reports, regrades."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Query, Response, UploadFile, status

from server.api import RowId
from server.db import committing
from server.deps import CourseDep, CourseStaffDep, CurrentUser, SessionDep, SettingsDep
from server.models import Job, Submission
from server.schemas import ErrorPublic, SubmissionPublic
from server.services.grades import grading, visibility
from server.services.intake import submissions as submission_service
from server.services.packages import assignments as assignment_service
from server.services.people import courses as course_service
from server.services.records import final_grades
from server.settings import ServerSettings

router = APIRouter(prefix="/api", tags=["submissions"],
                   responses={401: {"model": ErrorPublic}, 403: {"model": ErrorPublic},
                              404: {"model": ErrorPublic}, 422: {"model": ErrorPublic}})


def public(session: SessionDep, sub: Submission, *, with_report: bool,
           settings: ServerSettings, job: Job | None = None, position: int | None = None,
           waiting: dict[str, str | None] | None = None, staff: bool = False) -> SubmissionPublic:
    """The submission as its reader sees it (`staff`: one of the course's staff); `job`: its
    latest job, `position` that job's place in its queue, and `waiting` what each queue waits
    for so far, when the caller has them."""
    report = None
    if with_report:
        row = grading.report_of(session=session, submission_id=sub.id)
        report = visibility.for_reader(session=session, sub=sub,
                                       report=row.report if row else None, staff=staff)
    a = sub.assignment
    out = SubmissionPublic(
        id=sub.id, assignment=f"{a.course.slug}/{a.slug}", status=sub.status, verdict=sub.verdict,
        score=sub.score, late=sub.late, filenames=sub.filenames, created_at=sub.created_at,
        finished_at=sub.finished_at, report=report)
    if with_report and (final := final_grades.settled(session=session, sub=sub)) is not None:
        out.final_score, out.final_speedup = final.score, final.speedup
    at = submission_service.place(session=session, submission=sub, live_s=settings.runner_live_s,
                                  job=job, position=position, waiting=waiting)
    out.queue, out.queue_position, out.waiting_for = at.queue, at.position, at.waiting_for
    return out


@router.post("/courses/{course}/assignments/{slug}/submissions", response_model=SubmissionPublic,
             status_code=status.HTTP_201_CREATED,
             responses={413: {"model": ErrorPublic}, 429: {"model": ErrorPublic}})
def submit(slug: str, files: Annotated[list[UploadFile], File(description="solution file(s)")],
           access: CourseDep, session: SessionDep, settings: SettingsDep,
           spend_late_days: Annotated[bool, Query(
               description="A late upload the course's late days cover spends them (409 "
                           "without it, saying how many: GET …/late-days first)")] = False,
           ) -> SubmissionPublic:
    """Upload a solution; it is stored, then queued for grading."""
    uploads = []
    for f in files:
        uploads.append((f.filename or "upload", f.file.read(settings.max_upload_bytes + 1)))
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    with committing(session):
        sub, job = submission_service.create(session=session, user=access.user, assignment=a,
                                             role=access.role, uploads=uploads,
                                             intake=submission_service.Intake.of(settings),
                                             spend_late_days=spend_late_days)
    return public(session, sub, with_report=False, settings=settings, job=job)


@router.get("/courses/{course}/assignments/{slug}/submissions",
            response_model=list[SubmissionPublic])
def course_submissions(slug: str, access: CourseStaffDep, session: SessionDep,
                       settings: SettingsDep) -> list[SubmissionPublic]:
    """Every submission of the assignment, newest first (the course's instructors and TAs)."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    # A few queries for the whole list, not a few per submission (a deadline night's queue).
    jobs = submission_service.latest_jobs(session=session, assignment=a)
    positions = submission_service.queue_positions(session=session, jobs=jobs.values())
    waiting: dict[str, str | None] = {}
    out = []
    for s in submission_service.of_assignment(session=session, assignment=a)[::-1]:
        job = jobs.get(s.id)
        out.append(public(session, s, with_report=False, settings=settings, job=job,
                          position=positions.get(job.id) if job else None, waiting=waiting))
        out[-1].student = s.user.email
    return out


@router.get("/submissions", response_model=list[SubmissionPublic])
def my_submissions(session: SessionDep, user: CurrentUser,
                   settings: SettingsDep) -> list[SubmissionPublic]:
    return [public(session, s, with_report=False, settings=settings)
            for s in submission_service.mine(session=session, user=user)]


def _visible(session: SessionDep, user: CurrentUser, submission_id: int) -> Submission:
    return submission_service.get_visible(session=session, user=user, submission_id=submission_id)


@router.get("/submissions/{submission_id}", response_model=SubmissionPublic)
def get_submission(submission_id: RowId, session: SessionDep, user: CurrentUser,
                   settings: SettingsDep) -> SubmissionPublic:
    """Status and, once graded, the full report (its owner or the course's staff)."""
    sub = _visible(session, user, submission_id)
    role = course_service.role(session=session, user=user, course=sub.assignment.course)
    return public(session, sub, with_report=True, settings=settings,
                  staff=course_service.is_staff(role))


@router.get("/submissions/{submission_id}/files",
            responses={200: {"content": {"application/zip": {}}}})
def submission_files(submission_id: RowId, session: SessionDep, user: CurrentUser,
                     settings: SettingsDep) -> Response:
    sub = _visible(session, user, submission_id)
    return Response(submission_service.files_of(submission=sub,
                                                artifacts_root=settings.artifacts_dir),
                    media_type="application/zip")


def _role(session: SessionDep, user: CurrentUser, sub: Submission) -> str | None:
    return course_service.role(session=session, user=user, course=sub.assignment.course)


@router.post("/submissions/{submission_id}/regrade", response_model=SubmissionPublic,
             status_code=status.HTTP_202_ACCEPTED)
def regrade(submission_id: RowId, session: SessionDep, user: CurrentUser,
            settings: SettingsDep) -> SubmissionPublic:
    """Grade again on the assignment's current version (the course's instructors and TAs)."""
    sub = _visible(session, user, submission_id)
    with committing(session):
        submission_service.regrade(session=session, actor=user, submission=sub,
                                   role=_role(session, user, sub))
    return public(session, sub, with_report=False, settings=settings)


@router.post("/submissions/{submission_id}/cancel", response_model=SubmissionPublic,
             responses={409: {"model": ErrorPublic}})
def cancel(submission_id: RowId, session: SessionDep, user: CurrentUser,
           settings: SettingsDep) -> SubmissionPublic:
    """Stop a queued or running submission (its owner or the course's staff)."""
    sub = _visible(session, user, submission_id)
    with committing(session):
        submission_service.cancel(session=session, actor=user, submission=sub,
                                  role=_role(session, user, sub))
    return public(session, sub, with_report=False, settings=settings)


@router.post("/courses/{course}/assignments/{slug}/regrade", status_code=status.HTTP_202_ACCEPTED)
def regrade_all(slug: str, access: CourseStaffDep, session: SessionDep) -> dict[str, int]:
    """Queue every submission of the assignment for regrading, at the lowest priority."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    with committing(session):
        n = submission_service.regrade_all(session=session, actor=access.user, assignment=a,
                                           role=access.role)
    return {"queued": n}
