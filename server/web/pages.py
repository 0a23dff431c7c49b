"""Server-rendered pages: the same services and permission rules as the API, a session cookie,
a CSRF token in every form, Jinja2's autoescaping for everything a user or a submission wrote."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from markdown_it import MarkdownIt
from markupsafe import Markup
from pydantic import ValidationError
from sqlalchemy import select

from server.api import RowId
from server.db import committing
from server.deps import ClientAddress, LoginLimitsDep, SessionDep, SettingsDep
from server.models import Assignment, Course, Submission, User
from server.schemas import JoinCreate, UserCreate
from server.services.fleet import readiness as readiness_service
from server.services.fleet import retiming, routing
from server.services.grades import extensions as extension_service
from server.services.grades import grading as grading_service
from server.services.grades import late_days, score_parts, visibility
from server.services.grades import statistics as stats_service
from server.services.intake import practice as practice_service
from server.services.intake import submissions as submission_service
from server.services.notices import announcements
from server.services.packages import assignments as assignment_service
from server.services.people import courses as course_service
from server.services.people import teams as team_service
from server.services.people import users as user_service
from server.services.records import final_grades
from server.services.records.errors import DomainError, Forbidden
from server.settings import ServerSettings
from server.web.plots import profile_pictures, scaling_svg, weak_svg
from server.web.plumbing import (
    Csrf,
    PageUser,
    act_on_submission,
    anonymous_csrf,
    event_stream,
    reasons,
    render,
    safe_next,
    start_session,
    templates,
)

router = APIRouter(include_in_schema=False)
FINAL = ("graded", "error", "cancelled")
# Statements are Markdown written by instructors: rendered without raw HTML, links kept safe.
_markdown = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")


# accounts ----------------------------------------------------------------------------------
@router.get("/login")
def login_form(request: Request, next: str = "/") -> HTMLResponse:
    anonymous_csrf(request)
    return render(request, "login.html", next=safe_next(next))


@router.post("/login", dependencies=[Csrf])
def login(request: Request, session: SessionDep, settings: SettingsDep,
          address: ClientAddress, limits: LoginLimitsDep, email: Annotated[str, Form()],
          password: Annotated[str, Form()], next: Annotated[str, Form()] = "/") -> Response:
    try:
        with committing(session):
            user = user_service.authenticate(session=session, email=email, password=password,
                                             address=address, limits=limits)
            start_session(request, session, settings, user)
    except DomainError as exc:
        page = render(request, "login.html", status_code=exc.status, error=exc.message,
                      next=safe_next(next), email=email)
        if isinstance(exc, user_service.TooManyAttempts):
            page.headers["Retry-After"] = str(exc.retry_after_s)
        return page
    return RedirectResponse(safe_next(next), status_code=303)


@router.get("/register")
def register_form(request: Request, code: str = "") -> HTMLResponse:
    anonymous_csrf(request)
    return render(request, "register.html", code=code)


@router.post("/register", dependencies=[Csrf])
def register(request: Request, session: SessionDep, settings: SettingsDep,
             email: Annotated[str, Form()], name: Annotated[str, Form()],
             password: Annotated[str, Form()], join_code: Annotated[str, Form()],
             alias: Annotated[str, Form()] = "") -> Response:
    form = {"email": email, "name": name, "code": join_code, "alias": alias}
    try:  # the API's own rules (email, password length, alias characters)
        body = UserCreate(email=email, name=name, password=password, join_code=join_code,
                          alias=alias or None)
    except ValidationError as exc:
        return render(request, "register.html", status_code=422, error=reasons(exc), **form)
    try:
        with committing(session):
            user = user_service.register(session=session, email=body.email, name=body.name,
                                         password=body.password, join_code=body.join_code,
                                         alias=body.alias)
            start_session(request, session, settings, user)
    except DomainError as exc:
        return render(request, "register.html", status_code=exc.status, error=exc.message, **form)
    return RedirectResponse("/", status_code=303)


@router.post("/logout", dependencies=[Csrf])
def logout(request: Request, session: SessionDep, user: PageUser) -> Response:
    with committing(session):
        user_service.revoke_token(session=session, raw=str(request.session.get("token")))
    request.session.clear()
    return RedirectResponse("/login", status_code=303)


# student pages -----------------------------------------------------------------------------
@router.get("/")
def home(request: Request, session: SessionDep, settings: SettingsDep, user: PageUser,
         joined: str = "") -> HTMLResponse:
    return home_page(request, session, settings, user, joined=joined)


def home_page(request: Request, session: SessionDep, settings: ServerSettings, user: User, *,
              status_code: int = 200, **extra: str) -> HTMLResponse:
    """The user's courses, each with its assignments, points and announcements."""
    courses = []
    for course, role in course_service.mine(session=session, user=user):
        items = assignment_service.offered(session=session, course=course)
        courses.append({"course": course, "role": role, "assignments": items,
                        "announcements": announcements.of_course(session=session, course=course),
                        "late_days": late_days.balance(session=session, course=course,
                                                       user_id=user.id)
                        if role == "student" and course.late_days else None,
                        "not_open": _not_open(session, settings, items),
                        "points": {} if role != "student" else {
                            a.id: parts for a in items if (parts := score_parts.counted(
                                session=session, assignment=a, user_id=user.id))}})
    return render(request, "home.html", status_code=status_code, user=user, courses=courses,
                  **extra)


@router.post("/join", dependencies=[Csrf])
def join(request: Request, session: SessionDep, settings: SettingsDep, user: PageUser,
         join_code: Annotated[str, Form()], alias: Annotated[str, Form()] = "") -> Response:
    """Join another course with its join code (the first one came with registering)."""
    form = {"code": join_code, "alias": alias}
    try:
        body = JoinCreate(join_code=join_code, alias=alias or None)
    except ValidationError as exc:
        return home_page(request, session, settings, user, status_code=422, error=reasons(exc),
                     **form)
    try:
        with committing(session):
            enrollment = course_service.join(session=session, user=user,
                                             join_code=body.join_code, alias=body.alias)
            slug = enrollment.course.slug
    except DomainError as exc:
        return home_page(request, session, settings, user, status_code=exc.status,
                     error=exc.message, **form)
    return RedirectResponse(f"/?joined={slug}", status_code=303)


def _not_open(session: SessionDep, settings: ServerSettings, items: list[Assignment]
              ) -> dict[int, str]:
    """Why students cannot submit yet, for each of `items` that is not open."""
    said = {a.id: readiness_service.reason(session=session, assignment=a,
                                           live_s=settings.runner_live_s) for a in items}
    return {k: why for k, why in said.items() if why is not None}


def page_assignment(session: SessionDep, user: User, course: str, slug: str
                ) -> tuple[Course, str, Assignment]:
    c, role = course_service.with_role(session=session, slug=course, user=user)
    if role is None:
        raise Forbidden("you are not enrolled in this course")
    return c, role, assignment_service.get(session=session, course=c, slug=slug)


def render_assignment(request: Request, session: SessionDep, settings: SettingsDep, user: User,
                     course: str, slug: str, *, error: str | None = None,
                     status_code: int = 200) -> HTMLResponse:
    c, role, a = page_assignment(session, user, course, slug)
    manifest = assignment_service.manifest_of(a)
    assert a.current_version is not None
    statement = assignment_service.statement_of(settings.artifacts_dir,
                                                a.current_version.bundle_sha256, manifest.statement)
    allowed = sorted(set(manifest.entry.allowed_files) | {manifest.entry.file})
    mine = submission_service.mine(session=session, user=user, assignment=a)
    team = team_service.team_of(session=session, user_id=user.id, assignment_id=a.id)
    return render(request, "assignment.html", status_code=status_code, user=user, course=c,
                  team_work=team_service.team_work(a), team=team, team_locked=team_service.locked(a),
                  team_members=team_service.members(team) if team else [],
                  role=role, a=a, manifest=manifest, allowed=allowed, error=error,
                  statement=Markup(_markdown.render(statement)),
                  max_bytes=settings.max_upload_bytes,
                  late=submission_service.is_late(session=session, assignment=a, user=user),
                  late_quote=late_days.quote_now(session=session, assignment=a, user=user)
                  if role == "student" else None,
                  extended=extension_service.extended(session=session, assignment=a,
                                                      user_id=user.id),
                  mine=mine, parts=score_parts.of_many(session=session, subs=mine),
                  practice_runs=practice_service.history(session=session, assignment=a,
                                                         user=user, limit=20),
                  practice_limits=practice_service.limits(a),
                  speedups=stats_service.speedups_of(
                      session=session, submission_ids=[x.id for x in mine]),
                  not_open=_not_open(session, settings, [a]).get(a.id),
                  simulated=routing.simulable(manifest.model_dump()) and routing.target(
                      session=session, live_s=settings.runner_live_s) == "gpusim")


@router.get("/c/{course}/{slug}")
def assignment_page(course: str, slug: str, request: Request, session: SessionDep,
                    settings: SettingsDep, user: PageUser) -> HTMLResponse:
    return render_assignment(request, session, settings, user, course, slug)


@router.post("/c/{course}/{slug}/submit", dependencies=[Csrf])
def submit(course: str, slug: str, request: Request, session: SessionDep, settings: SettingsDep,
           user: PageUser, files: Annotated[list[UploadFile], File()],
           spend_late_days: Annotated[str, Form()] = "") -> Response:
    def act(role: str | None, a: Assignment, uploads: list[tuple[str, bytes]],
            intake: submission_service.Intake) -> str:
        sub, _ = submission_service.create(session=session, user=user, assignment=a, role=role,
                                           uploads=uploads, intake=intake,
                                           spend_late_days=spend_late_days == "yes")
        return f"/s/{sub.id}"
    return upload_action(request, session, settings, user, course, slug, files, act)


def upload_action(request: Request, session: SessionDep, settings: SettingsDep, user: User,
                  course: str, slug: str, files: list[UploadFile],
                  action: Callable[[str | None, Assignment, list[tuple[str, bytes]],
                                    submission_service.Intake], str]) -> Response:
    """An upload from the assignment's page (a submission, a practice run): `action(role,
    assignment, uploads, intake)` in one transaction, then to the page it names; refused, back
    to the assignment's page saying why (to the login where the account was just linked to
    another one)."""
    _, role, a = page_assignment(session, user, course, slug)
    uploads = [(f.filename or "upload", f.file.read(settings.max_upload_bytes + 1)) for f in files]
    uid = user.id
    try:
        with committing(session):
            to = action(role, a, uploads, submission_service.Intake.of(settings))
    except DomainError as exc:
        if session.get(User, uid) is None:  # linked to another account meanwhile: sign in again
            return RedirectResponse("/login", status_code=303)
        return render_assignment(request, session, settings, user, course, slug,
                                 error=exc.message, status_code=exc.status)
    return RedirectResponse(to, status_code=303)


def _visible(session: SessionDep, user: User, submission_id: int) -> Submission:
    return submission_service.get_visible(session=session, user=user, submission_id=submission_id)


def _live(session: SessionDep, settings: SettingsDep, sub: Submission) -> dict[str, Any]:
    """What the live status box shows (also what the event stream sends)."""
    at = submission_service.place(session=session, submission=sub, live_s=settings.runner_live_s)
    return {"status": sub.status, "verdict": sub.verdict, "queue": at.queue,
            "position": at.position, "waiting_for": at.waiting_for, "final": sub.status in FINAL}


@router.get("/s/{submission_id}")
def submission_page(submission_id: RowId, request: Request, session: SessionDep,
                    settings: SettingsDep, user: PageUser) -> HTMLResponse:
    sub = _visible(session, user, submission_id)
    row = grading_service.report_of(session=session, submission_id=sub.id)
    a = sub.assignment
    role = course_service.role(session=session, user=user, course=a.course)
    report = visibility.for_reader(session=session, sub=sub, report=row.report if row else None,
                                   staff=course_service.is_staff(role))
    pictures = profile_pictures(report)
    return render(request, "submission.html", user=user, sub=sub, a=a, report=report,
                  timeline=Markup(pictures["timeline"]), flame=Markup(pictures["flame"]),
                  staff=course_service.is_staff(role), instructor=role == "instructor",
                  review=row.review if row else None,
                  retime=retiming.promise(sub=sub, row=row, after_s=settings.retime_after_s),
                  final=final_grades.settled(session=session, sub=sub),
                  parts=score_parts.of(session=session, sub=sub, row=row),
                  live=_live(session, settings, sub),
                  plot=Markup(scaling_svg(report["scaling"])) if report else "",
                  weak_plot=Markup(weak_svg(report.get("weak_scaling", []))) if report else "")


@router.post("/s/{submission_id}/cancel", dependencies=[Csrf])
def cancel_submission(submission_id: RowId, session: SessionDep, user: PageUser) -> Response:
    """Cancel a queued or running submission (its owner, or the course's instructors)."""
    return act_on_submission(submission_id, session, user, submission_service.cancel)


@router.get("/s/{submission_id}/events")
def submission_events(submission_id: RowId, request: Request,
                      settings: SettingsDep) -> StreamingResponse:
    return event_stream(
        request, lambda s, user: _visible(s, user, submission_id).id,
        lambda s, sub_id: _live(s, settings, s.get_one(Submission, sub_id)))


@router.get("/c/{course}/{slug}/leaderboard")
def leaderboard_page(course: str, slug: str, request: Request, session: SessionDep,
                     user: PageUser) -> HTMLResponse:
    c, role, a = page_assignment(session, user, course, slug)
    board = request.app.state.boards.board(session=session, assignment=a)
    row = templates.get_template("_board_row.html")
    rows = board.rows("page", lambda e, you: row.render(e=e, you=you), user.id)
    return render(request, "leaderboard.html", user=user, course=c, a=a, role=role,
                  entries=board.entries, rows=Markup("\n".join(rows)))


@router.get("/c/{course}/{slug}/leaderboard/events")
def leaderboard_events(course: str, slug: str, request: Request) -> StreamingResponse:
    """The board's version, bumped by every change to the board."""
    return event_stream(
        request, lambda s, user: page_assignment(s, user, course, slug)[2].id,
        lambda s, assignment_id: s.scalar(select(Assignment.board_version).where(
            Assignment.id == assignment_id)), every_s=2.0, shared="board")


def _course_assignments(session: SessionDep, user: User, course: str
                        ) -> tuple[Course, str, list[Assignment]]:
    c, role = course_service.with_role(session=session, slug=course, user=user)
    if role is None:
        raise Forbidden("you are not enrolled in this course")
    return c, role, assignment_service.offered(session=session, course=c)


@router.get("/c/{course}/-/board")
def course_board_page(course: str, request: Request, session: SessionDep,
                      user: PageUser) -> HTMLResponse:
    """The course's board: total points over its tasks, each task's place (a treasure hunt)."""
    c, role, items = _course_assignments(session, user, course)
    board = request.app.state.boards.course_board(session=session, assignments=items)
    row = templates.get_template("_course_row.html")
    rows = board.rows("page", lambda e, you: row.render(e=e, you=you), user.id)
    return render(request, "course_board.html", user=user, course=c, role=role,
                  tasks=board.tasks, entries=board.entries, rows=Markup("\n".join(rows)))


@router.get("/c/{course}/-/board/events")
def course_board_events(course: str, request: Request) -> StreamingResponse:
    """Every task's board version: one changes, the course's board does."""
    return event_stream(
        request, lambda s, user: _course_assignments(s, user, course)[0].id,
        lambda s, course_id: [[i, v] for i, v in s.execute(
            select(Assignment.id, Assignment.board_version)
            .where(Assignment.course_id == course_id).order_by(Assignment.id))],
        every_s=2.0, shared="course-board")
