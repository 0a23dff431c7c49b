"""Practice runs: a student's file on the grading hardware, the public tests (and one short
timing) only, never graded (services/intake/practice.py)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, File, Form, UploadFile, status
from pydantic import Field

from server.api import RowId
from server.db import committing
from server.deps import CourseDep, CourseStaffDep, CurrentUser, SessionDep, SettingsDep
from server.models import PracticeRun
from server.schemas import ErrorPublic, Public, UtcDatetime
from server.schemas_practice import PauseIn
from server.services.intake import practice as practice_service
from server.services.intake import submissions as submission_service
from server.services.packages import assignments as assignment_service

router = APIRouter(prefix="/api", tags=["practice"],
                   responses={401: {"model": ErrorPublic}, 403: {"model": ErrorPublic},
                              404: {"model": ErrorPublic}, 422: {"model": ErrorPublic}})
A = "/courses/{course}/assignments/{slug}"


class PracticePublic(Public):
    id: int
    assignment: str = Field(description="course/slug")
    student: str | None = Field(default=None, description="Whose run (staff only)")
    status: str = Field(description="queued, running, done or error (the platform's)")
    verdict: str | None
    timed: bool
    profiled: bool
    filenames: list[str]
    created_at: UtcDatetime
    finished_at: UtcDatetime | None
    error: str | None
    report: dict[str, Any] | None = Field(
        default=None, description="The practice report (GradeReport, `practice` true): public "
        "tests only, no points")


class PracticeRules(Public):
    per_hour: int
    per_day: int
    timing: bool = Field(description="Whether a practice run may ask for the short timing")
    profiles: bool = Field(description="Whether a practice run may ask for a profile")
    graded_profiles: bool = Field(description="Whether each graded grading is profiled too, "
                                  "after its timing")
    paused_until: UtcDatetime | None


def public(run: PracticeRun, *, with_report: bool, staff: bool = False) -> PracticePublic:
    a = run.assignment
    return PracticePublic(
        id=run.id, assignment=f"{a.course.slug}/{a.slug}",
        student=run.user.email if staff else None, status=run.status, verdict=run.verdict,
        timed=run.timed, profiled=run.profiled, filenames=run.filenames, created_at=run.created_at,
        finished_at=run.finished_at, error=run.error,
        report=run.report if with_report else None)


def rules(a: Any) -> PracticeRules:
    per_hour, per_day = practice_service.limits(a)
    return PracticeRules(per_hour=per_hour, per_day=per_day, timing=a.practice_timing,
                         profiles=a.practice_profiles, graded_profiles=a.graded_profiles,
                         paused_until=a.practice_paused_until)


@router.post(A + "/practice", response_model=PracticePublic,
             status_code=status.HTTP_201_CREATED,
             responses={409: {"model": ErrorPublic}, 413: {"model": ErrorPublic},
                        429: {"model": ErrorPublic}})
def start(slug: str, files: Annotated[list[UploadFile], File(description="solution file(s)")],
          access: CourseDep, session: SessionDep, settings: SettingsDep,
          timed: Annotated[bool, Form(description="one short timing as well")] = False,
          profile: Annotated[bool, Form(description="a profile of one untimed call as well")]
          = False) -> PracticePublic:
    """Run a file on the grading hardware without it counting: the public tests only (never
    the hidden ones), and with `timed` one short timing. 429 past the practice limit, saying
    when the next run is allowed; never a grade, the board, the graded quota or an export."""
    uploads = [(f.filename or "upload", f.file.read(settings.max_upload_bytes + 1)) for f in files]
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    with committing(session):
        run, _ = practice_service.start(session=session, user=access.user, assignment=a,
                                        role=access.role, uploads=uploads, timed=timed,
                                        profiled=profile,
                                        intake=submission_service.Intake.of(settings))
    return public(run, with_report=False)


@router.get(A + "/practice", response_model=list[PracticePublic])
def mine(slug: str, access: CourseDep, session: SessionDep) -> list[PracticePublic]:
    """Your practice runs of the assignment, newest first."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    return [public(r, with_report=False)
            for r in practice_service.history(session=session, assignment=a, user=access.user)]


@router.get(A + "/practice/all", response_model=list[PracticePublic])
def everyone(slug: str, access: CourseStaffDep, session: SessionDep) -> list[PracticePublic]:
    """Every student's practice runs, newest first (the course's staff)."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    return [public(r, with_report=False, staff=True)
            for r in practice_service.history(session=session, assignment=a)]


@router.get(A + "/practice-rules", response_model=PracticeRules)
def get_rules(slug: str, access: CourseDep, session: SessionDep) -> PracticeRules:
    """The practice limits, whether runs may be timed, and a pause."""
    return rules(assignment_service.get(session=session, course=access.course, slug=slug))


@router.put(A + "/practice-pause", response_model=PracticeRules)
def pause(slug: str, body: PauseIn, access: CourseStaffDep, session: SessionDep
          ) -> PracticeRules:
    """Take no student's practice run until a time (before a deadline, say); staff only."""
    with committing(session):
        a = assignment_service.get(session=session, course=access.course, slug=slug)
        practice_service.pause(session=session, assignment=a, actor=access.user,
                               role=access.role, until=body.until)
    return rules(a)


@router.get("/practice/{run_id}", response_model=PracticePublic)
def one(run_id: RowId, user: CurrentUser, session: SessionDep) -> PracticePublic:
    """A practice run with its report: its student's, or their course's staff's."""
    run = practice_service.get_visible(session=session, user=user, run_id=run_id)
    return public(run, with_report=True, staff=run.user_id != user.id)
