"""Courses and assignments."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Query, Request, Response, UploadFile, status
from sqlalchemy.orm import Session

from server.db import committing
from server.deps import (
    CourseDep,
    CourseInstructorDep,
    CourseStaffDep,
    CurrentUser,
    InstructorUser,
    SessionDep,
    SettingsDep,
)
from server.models import Assignment, User
from server.schemas import (
    AssignmentPublic,
    CourseBoardEntryPublic,
    CourseBoardPublic,
    CourseCellPublic,
    CourseCreate,
    CoursePublic,
    CourseTaskPublic,
    ErrorPublic,
    ImportCreate,
    JoinCreate,
    LeaderboardEntryPublic,
    ShownIn,
    VersionPublic,
)
from server.schemas_assignment import AssignmentUpdate
from server.services.fleet import readiness as readiness_service
from server.services.grades import extensions as extension_service
from server.services.grades import leaderboard as leaderboard_service
from server.services.grades import policies as policy_service
from server.services.grades import visibility
from server.services.packages import assignments as assignment_service
from server.services.people import courses as course_service
from server.services.records.errors import Invalid
from server.settings import ServerSettings

router = APIRouter(prefix="/api/courses", tags=["courses"],
                   responses={401: {"model": ErrorPublic}, 403: {"model": ErrorPublic},
                              404: {"model": ErrorPublic}, 422: {"model": ErrorPublic}})


def assignment_public(a: Assignment, role: str, session: Session, settings: ServerSettings,
                      user: User | None = None) -> AssignmentPublic:
    """The assignment as `role` sees it; with `user`, their own deadline too."""
    m = assignment_service.manifest_of(a)
    assert a.current_version is not None
    v, newest = a.current_version, a.versions[-1]
    candidate = None
    if course_service.is_staff(role) and newest.id != v.id:
        candidate = VersionPublic(version=newest.version, validation=newest.status,
                                  checks=newest.checks)
    own = None
    if user is not None:
        own = extension_service.extended(session=session, assignment=a, user_id=user.id)
    return AssignmentPublic(slug=a.slug, title=a.title, version=a.current_version.version,
                            deadline=a.deadline, your_deadline=own,
                            late_policy=a.late_policy,
                            late_penalty=a.late_penalty, quota_count=a.quota_count,
                            hidden_tests_shown=a.hidden_tests_shown,  # type: ignore[arg-type]
                            quota_window_s=a.quota_window_s,
                            speedup_min=a.speedup_min or m.scoring.speedup_min,
                            speedup_full=a.speedup_full or m.scoring.speedup_full,
                            kind=m.resources.kind,
                            entry_file=m.entry.file,
                            allowed_files=sorted(set(m.entry.allowed_files) | {m.entry.file}),
                            validation=v.status,
                            readiness=readiness_service.reason(session=session, assignment=a,
                                                               live_s=settings.runner_live_s),
                            checks=v.checks if course_service.is_staff(role) else None,
                            candidate=candidate)


@router.post("", response_model=CoursePublic, status_code=status.HTTP_201_CREATED,
             responses={409: {"model": ErrorPublic}})
def create_course(body: CourseCreate, session: SessionDep, user: InstructorUser) -> CoursePublic:
    """Create a course; the response carries its join code."""
    with committing(session):
        c = course_service.create(session=session, actor=user, slug=body.slug, title=body.title)
        return CoursePublic(slug=c.slug, title=c.title, role="instructor", join_code=c.join_code)


@router.get("", response_model=list[CoursePublic])
def my_courses(session: SessionDep, user: CurrentUser) -> list[CoursePublic]:
    return [CoursePublic(slug=c.slug, title=c.title, role=r,
                         join_code=c.join_code if r == "instructor" else None)
            for c, r in course_service.mine(session=session, user=user)]


@router.post("/join", response_model=CoursePublic)
def join(body: JoinCreate, session: SessionDep, user: CurrentUser) -> CoursePublic:
    """Join another course with its join code."""
    with committing(session):
        e = course_service.join(session=session, user=user, join_code=body.join_code,
                                alias=body.alias)
        return CoursePublic(slug=e.course.slug, title=e.course.title, role=e.role)


@router.get("/{course}/assignments", response_model=list[AssignmentPublic])
def list_assignments(access: CourseDep, session: SessionDep,
                     settings: SettingsDep) -> list[AssignmentPublic]:
    return [assignment_public(a, access.role, session, settings, access.user)
            for a in assignment_service.offered(session=session, course=access.course)]


@router.post("/{course}/assignments/import", response_model=AssignmentPublic,
             status_code=status.HTTP_201_CREATED)
def import_folder(body: ImportCreate, access: CourseInstructorDep, session: SessionDep,
                  settings: SettingsDep, next_version: NextVersion = False) -> AssignmentPublic:
    """Import a package from the server's assignments folder (every problem is reported)."""
    root = settings.assignments_dir.resolve()
    folder = (root / body.path).resolve()
    if not folder.is_relative_to(root) or not folder.is_dir():
        raise Invalid(f"no package folder {body.path!r} under the assignments dir")
    return _import(access, session, settings, assignment_service.read_folder(folder),
                   next_version)


@router.post("/{course}/assignments/upload", response_model=AssignmentPublic,
             status_code=status.HTTP_201_CREATED, responses={413: {"model": ErrorPublic}})
def import_zip(package: Annotated[UploadFile, File(description="zip of the package")],
               access: CourseInstructorDep, session: SessionDep,
               settings: SettingsDep, next_version: NextVersion = False) -> AssignmentPublic:
    """Import a package uploaded as a zip (paths checked, bombs refused)."""
    files = assignment_service.package_upload(package.file,
                                              max_bytes=settings.max_package_bytes)
    return _import(access, session, settings, files, next_version)


NextVersion = Annotated[bool, Query(
    description="where the package's version has other files and submissions were graded "
                "under it: import it as the next free version number instead of refusing it")]


def _import(access: CourseInstructorDep, session: SessionDep, settings: SettingsDep,
            files: dict[str, bytes], next_version: bool) -> AssignmentPublic:
    with committing(session):
        v = assignment_service.import_files(session=session, actor=access.user,
                                            course=access.course, files=files,
                                            artifacts_root=settings.artifacts_dir,
                                            role=access.role, next_version=next_version)
        a = session.get(Assignment, v.assignment_id)
        assert a is not None
        session.refresh(a)
        return assignment_public(a, access.role, session, settings)


@router.get("/{course}/assignments/{slug}", response_model=AssignmentPublic)
def get_assignment(slug: str, access: CourseDep, session: SessionDep,
                   settings: SettingsDep) -> AssignmentPublic:
    return assignment_public(assignment_service.get(session=session, course=access.course,
                                                    slug=slug), access.role, session, settings,
                             access.user)


@router.patch("/{course}/assignments/{slug}", response_model=AssignmentPublic)
def update_assignment(slug: str, body: AssignmentUpdate, access: CourseInstructorDep,
                      session: SessionDep, settings: SettingsDep) -> AssignmentPublic:
    """Deadline, late policy, quotas."""
    with committing(session):
        a = assignment_service.get(session=session, course=access.course, slug=slug)
        policy_service.update(session=session, actor=access.user, assignment=a,
                              role=access.role,
                              changes=body.model_dump(exclude_unset=True))
        return assignment_public(a, access.role, session, settings)


@router.put("/{course}/assignments/{slug}/hidden-tests", response_model=AssignmentPublic)
def hidden_tests(slug: str, body: ShownIn, access: CourseStaffDep, session: SessionDep,
                 settings: SettingsDep) -> AssignmentPublic:
    """When students read a hidden test's whole message, for this course offering
    (instructors only); the package's [feedback] per test still decides where it names one."""
    with committing(session):
        a = assignment_service.get(session=session, course=access.course, slug=slug)
        visibility.set_mode(session=session, assignment=a, actor=access.user, role=access.role,
                            shown=body.hidden_tests)
        return assignment_public(a, access.role, session, settings)


@router.get("/{course}/assignments/{slug}/starter",
            responses={200: {"content": {"application/zip": {}}}})
def starter(slug: str, access: CourseDep, session: SessionDep, settings: SettingsDep) -> Response:
    """Statement, starter and public tests as a zip (never the hidden tests)."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    data = assignment_service.student_files(assignment=a, artifacts_root=settings.artifacts_dir)
    return Response(data, media_type="application/zip", headers={
        "Content-Disposition": f'attachment; filename="{a.slug}-starter.zip"'})


@router.get("/{course}/assignments/{slug}/leaderboard",
            response_model=list[LeaderboardEntryPublic])
def leaderboard(slug: str, access: CourseDep, session: SessionDep, request: Request) -> Response:
    """Best fully-correct submission per student, by speedup; overlapping CIs are ties."""
    a = assignment_service.get(session=session, course=access.course, slug=slug)
    board = request.app.state.boards.board(session=session, assignment=a)
    staff = course_service.is_staff(access.role)

    def row(e: leaderboard_service.Entry, you: bool) -> bytes:
        return LeaderboardEntryPublic(
            rank=e.rank, mark=e.mark, tied=e.tied, alias=e.alias, speedup=e.speedup,
            ci_low=e.ci_low, ci_high=e.ci_high, score=e.score, tests=e.tests,
            performance=e.performance, you=you,
            submission_id=e.submission_id if you or staff else None).model_dump_json().encode()

    rows = board.rows("api-staff" if staff else "api-student", row, access.user.id)
    return Response(b"[" + b",".join(rows) + b"]", media_type="application/json")


@router.get("/{course}/leaderboard", response_model=CourseBoardPublic)
def course_leaderboard(access: CourseDep, session: SessionDep, request: Request) -> Response:
    """Students by total points over the course's assignments, with each task's place on its
    own board (a treasure hunt board); the same total over as many tasks shares a rank."""
    items = assignment_service.offered(session=session, course=access.course)
    board = request.app.state.boards.course_board(session=session, assignments=items)

    def row(e: leaderboard_service.CourseEntry, you: bool) -> bytes:
        return CourseBoardEntryPublic(
            rank=e.rank, tied=e.tied, alias=e.alias, total=e.total, tests=e.tests,
            performance=e.performance, manual=e.manual, solved=e.solved, you=you,
            tasks=[None if t is None else CourseCellPublic(rank=t.rank, tied=t.tied,
                                                           speedup=t.speedup, score=t.score,
                                                           mark=t.mark) for t in e.tasks]
        ).model_dump_json().encode()

    tasks = b",".join(CourseTaskPublic(slug=t.slug, title=t.title).model_dump_json().encode()
                      for t in board.tasks)
    rows = board.rows("api", row, access.user.id)
    return Response(b'{"tasks":[' + tasks + b'],"entries":[' + b",".join(rows) + b"]}",
                    media_type="application/json")
