"""The manage page's settings forms that are not the assignment's policy (admin.py): when
hidden tests' messages are shown, and the practice runs' limits and pause. Each form's work runs
in `manage_action`: one transaction, back to the page saying "Saved." or why not."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError

from server.db import committing
from server.deps import SessionDep
from server.models import Assignment, User
from server.schemas_assignment import AssignmentUpdate
from server.schemas_practice import PauseIn
from server.services.grades import policies as policy_service
from server.services.grades import visibility
from server.services.intake import practice as practice_service
from server.services.packages import assignments as assignment_service
from server.services.people import courses as course_service
from server.services.people import teams as team_service
from server.services.records.errors import DomainError, Invalid
from server.web.admin import course_for, render_manage
from server.web.plumbing import Csrf, PageUser, reasons

router = APIRouter(include_in_schema=False)


def manage_action(request: Request, session: SessionDep, user: User, course: str, slug: str,
                  action: Callable[[str | None, Assignment], None]) -> Response:
    """A manage-page form's work, `action(role, assignment)`, in one transaction: back to the
    page saying "Saved.", or with the refusal (a validation's reasons, a service's message)."""
    c, role = course_for(session, user, course, staff=True)
    a = assignment_service.get(session=session, course=c, slug=slug)
    try:
        with committing(session):
            action(role, a)
    except ValidationError as exc:
        return render_manage(request, session, user, course, slug, error=reasons(exc),
                             status_code=422)
    except DomainError as exc:
        return render_manage(request, session, user, course, slug, error=exc.message,
                             status_code=exc.status)
    return RedirectResponse(f"/c/{course}/{slug}/manage?saved=1", status_code=303)


@router.post("/c/{course}/{slug}/manage/hidden-tests", dependencies=[Csrf])
def hidden_tests(course: str, slug: str, request: Request, session: SessionDep, user: PageUser,
                 shown: Annotated[str, Form()] = "") -> Response:
    """When students read a hidden test's whole message ("": as the package says)."""
    return manage_action(request, session, user, course, slug, lambda role, a: visibility.set_mode(
        session=session, assignment=a, actor=user, role=role, shown=shown or None))


@router.post("/c/{course}/{slug}/manage/practice", dependencies=[Csrf])
def practice_rules(course: str, slug: str, request: Request, session: SessionDep,
                   user: PageUser, per_hour: Annotated[int, Form()],
                   per_day: Annotated[int, Form()], timing: Annotated[str, Form()] = "",
                   profiles: Annotated[str, Form()] = "",
                   graded_profiles: Annotated[str, Form()] = "") -> Response:
    """A student's practice runs per hour and day, whether they may be timed or profiled, and
    whether graded gradings are profiled too."""
    def act(role: str | None, a: Assignment) -> None:
        body = AssignmentUpdate(practice_per_hour=per_hour, practice_per_day=per_day,
                                practice_timing=timing == "on",
                                practice_profiles=profiles == "on",
                                graded_profiles=graded_profiles == "on")  # the API's rules
        policy_service.update(session=session, actor=user, assignment=a, role=role,
                              changes=body.model_dump(exclude_unset=True))
    return manage_action(request, session, user, course, slug, act)


@router.post("/c/{course}/{slug}/manage/practice-pause", dependencies=[Csrf])
def practice_pause(course: str, slug: str, request: Request, session: SessionDep,
                   user: PageUser, until: Annotated[str, Form()] = "") -> Response:
    """No student's practice run is taken until a time (empty: again now)."""
    def act(role: str | None, a: Assignment) -> None:
        try:
            body = PauseIn(until=until.strip() or None)  # type: ignore[arg-type]  # the API's rules
        except ValidationError as exc:
            raise Invalid("pause until: use a date and time with a zone, e.g. "
                          "2026-12-01T20:00+01:00") from exc
        practice_service.pause(session=session, assignment=a, actor=user, role=role,
                               until=body.until)
    return manage_action(request, session, user, course, slug, act)


@router.post("/c/{course}/{slug}/manage/teams", dependencies=[Csrf])
def team_rules(course: str, slug: str, request: Request, session: SessionDep, user: PageUser,
               team_max: Annotated[int, Form()], team_min: Annotated[int, Form()] = 1,
               by_students: Annotated[str, Form()] = "",
               lock_at: Annotated[str, Form()] = "") -> Response:
    """Team work: the sizes (largest 1: individual work), who forms teams, the lock."""
    def act(role: str | None, a: Assignment) -> None:
        body = AssignmentUpdate.model_validate({  # the API's rules, the lock's date among them
            "team_max": team_max, "team_min": team_min, "teams_by_students": by_students == "on",
            "team_lock_at": lock_at.strip() or None})
        policy_service.update(session=session, actor=user, assignment=a, role=role,
                              changes=body.model_dump(exclude_unset=True))
    return manage_action(request, session, user, course, slug, act)


@router.post("/c/{course}/{slug}/manage/teams-import", dependencies=[Csrf])
def teams_import(course: str, slug: str, request: Request, session: SessionDep, user: PageUser,
                 csv: Annotated[UploadFile, File()]) -> Response:
    """Teams from a CSV file (email, team): every row placed, or none."""
    raw = csv.file.read(1_000_001)

    def act(role: str | None, a: Assignment) -> None:
        if len(raw) > 1_000_000:
            raise Invalid("a teams CSV holds at most 1 MB")
        try:
            content = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise Invalid("the teams CSV is not UTF-8 text") from exc
        team_service.import_csv(session=session, actor=user, assignment=a, role=role,
                                text=content)
    return manage_action(request, session, user, course, slug, act)


@router.post("/c/{course}/{slug}/manage/teams-random", dependencies=[Csrf])
def teams_random(course: str, slug: str, request: Request, session: SessionDep,
                 user: PageUser) -> Response:
    """Every student in no team shuffled into new teams."""
    def act(role: str | None, a: Assignment) -> None:
        team_service.assign_at_random(session=session, actor=user, assignment=a, role=role)
    return manage_action(request, session, user, course, slug, act)


@router.post("/c/{course}/{slug}/manage/teams-place", dependencies=[Csrf])
def teams_place(course: str, slug: str, request: Request, session: SessionDep, user: PageUser,
                email: Annotated[str, Form(max_length=320)] = "",
                team: Annotated[str, Form(max_length=80)] = "") -> Response:
    """One student into a team by name (made if new), out of any other of the assignment."""
    def act(role: str | None, a: Assignment) -> None:
        student = course_service.student(session=session, course=a.course, email=email)
        team_service.place(session=session, actor=user, assignment=a, role=role,
                           student=student, team_name=" ".join(team.split()))
    return manage_action(request, session, user, course, slug, act)
