"""Instructor pages: courses, package import, assignment policy, submissions, regrades, fleet."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError

from server.api import RowId
from server.db import committing
from server.deps import DispatcherDep, SessionDep, SettingsDep
from server.models import Course, User
from server.schemas import (
    CourseCreate,
    ExtensionCreate,
    SimilarityCreate,
)
from server.schemas_assignment import AssignmentUpdate
from server.schemas_lti import LtiPlatformCreate
from server.services.fleet import readiness as readiness_service
from server.services.fleet import state as fleet_service
from server.services.grades import extensions as extension_service
from server.services.grades import finals, late_days
from server.services.grades import policies as policy_service
from server.services.intake import practice as practice_service
from server.services.intake import similarity as similarity_service
from server.services.intake import submissions as submission_service
from server.services.lti import passback as lti_passback
from server.services.lti import platforms as lti_platforms
from server.services.packages import assignments as assignment_service
from server.services.packages.assignments import PackageInvalid
from server.services.people import courses as course_service
from server.services.people import teams as team_service
from server.services.records import final_grades
from server.services.records.errors import DomainError, Forbidden, Invalid
from server.settings import ServerSettings
from server.web import when
from server.web.plumbing import (
    Csrf,
    PageUser,
    act_on_submission,
    form_number,
    reasons,
    render,
)

router = APIRouter(include_in_schema=False)


def course_for(session: SessionDep, user: User, course: str, *, staff: bool = False
            ) -> tuple[Course, str]:
    """The course and the user's role in it, when they are one of its instructors (`staff`: or
    of its TAs)."""
    c, role = course_service.with_role(session=session, slug=course, user=user)
    if role == "instructor" or (staff and course_service.is_staff(role)):
        assert role is not None
        return c, role
    raise Forbidden("only the course's instructors and TAs may see this page" if staff
                    else "only the course's instructors may do this")


@router.post("/courses", dependencies=[Csrf])
def create_course(request: Request, session: SessionDep, user: PageUser,
                  slug: Annotated[str, Form()], title: Annotated[str, Form()]) -> Response:
    try:
        body = CourseCreate(slug=slug, title=title)
        with committing(session):
            course_service.create(session=session, actor=user, slug=body.slug, title=body.title)
    except ValidationError as exc:
        return render(request, "error.html", status_code=422, user=user, error=reasons(exc),
                      status=422)
    return RedirectResponse(f"/c/{slug}", status_code=303)


def _course_page(request: Request, session: SessionDep, user: User, c: Course, role: str,
                 **extra: Any) -> HTMLResponse:
    items = assignment_service.of_course(session=session, course=c)
    settings: ServerSettings = request.app.state.settings
    extra.setdefault("not_open", {a.id: why for a in items if (why := readiness_service.reason(
        session=session, assignment=a, live_s=settings.runner_live_s)) is not None})
    if role == "instructor":
        extra.setdefault("platforms", lti_platforms.platforms(session=session, course=c))
        extra.setdefault("grade_posts", lti_passback.posts(session=session, course=c))
        extra.setdefault("base", str(request.base_url).rstrip("/"))
    just = request.query_params.get("imported") if request.method == "GET" else None
    for a in (a for a in items if a.slug == just):  # after the import's redirect
        v = a.versions[-1]
        extra["imported"] = f"{a.slug} {v.version}: {v.status} (a runner checks it now)"
    return render(request, "course.html", user=user, course=c, role=role, assignments=items,
                  **extra)


@router.get("/c/{course}")
def course_page(course: str, request: Request, session: SessionDep,
                user: PageUser) -> HTMLResponse:
    return _course_page(request, session, user, *course_for(session, user, course, staff=True))


@router.post("/c/{course}/-/lti", dependencies=[Csrf])
def register_lms(course: str, request: Request, session: SessionDep, user: PageUser,
                 issuer: Annotated[str, Form()], client_id: Annotated[str, Form()],
                 auth_login_url: Annotated[str, Form()], auth_token_url: Annotated[str, Form()],
                 key_set_url: Annotated[str, Form()], deployment_ids: Annotated[str, Form()],
                 settings: SettingsDep, allow_private_network: Annotated[str, Form()] = ""
                 ) -> Response:
    """Register an LMS (LTI 1.3) for the course; deployment ids separated by commas."""
    c, role = course_for(session, user, course)
    try:
        body = LtiPlatformCreate(issuer=issuer.strip(), client_id=client_id.strip(),
                                 auth_login_url=auth_login_url.strip(),
                                 auth_token_url=auth_token_url.strip(),
                                 key_set_url=key_set_url.strip(),
                                 deployment_ids=[d.strip() for d in deployment_ids.split(",")
                                                 if d.strip()],
                                 allow_private_network=allow_private_network == "on")
        with committing(session):
            lti_platforms.register(session=session, actor=user, course=c, role=role,
                                   **body.model_dump(),
                                   development=settings.environment == "development")
    except ValidationError as exc:
        return _course_page(request, session, user, c, role, error=reasons(exc),
                            status_code=422)
    except DomainError as exc:
        return _course_page(request, session, user, c, role, error=exc.message,
                            status_code=exc.status)
    return RedirectResponse(f"/c/{course}#lms", status_code=303)


@router.post("/c/{course}/import", dependencies=[Csrf])
def import_package(course: str, request: Request, session: SessionDep, settings: SettingsDep,
                   user: PageUser, package: Annotated[UploadFile, File()],
                   next_version: Annotated[bool, Form()] = False) -> Response:
    """Import a zip; every problem is listed, one per line."""
    c, role = course_for(session, user, course)
    try:
        with committing(session):
            files = assignment_service.package_upload(package.file,
                                                      max_bytes=settings.max_package_bytes)
            version = assignment_service.import_files(
                session=session, actor=user, course=c, files=files,
                artifacts_root=settings.artifacts_dir, role="instructor",
                next_version=next_version)
    except PackageInvalid as exc:
        return _course_page(request, session, user, c, role, problems=exc.problems,
                            error="the package has problems; nothing was imported",
                            status_code=422)
    except DomainError as exc:  # what the import did is rolled back (committing)
        return _course_page(request, session, user, c, role, error=exc.message,
                            status_code=exc.status)
    # Post/redirect/get: a refresh shows the page again instead of importing twice.
    return RedirectResponse(f"/c/{course}?imported={version.assignment.slug}", status_code=303)


def render_manage(request: Request, session: SessionDep, user: User, course: str, slug: str,
            **extra: Any) -> HTMLResponse:
    c, role = course_for(session, user, course, staff=True)
    a = assignment_service.get(session=session, course=c, slug=slug)
    subs = submission_service.of_assignment(session=session, assignment=a)
    who = request.query_params.get("student", "").strip().lower()
    verdict = request.query_params.get("verdict", "")
    if request.query_params.get("saved"):
        extra.setdefault("done", "Saved.")
    if request.query_params.get("final"):
        extra.setdefault("done", "Final run queued: every student's counted submission is timed "
                                 "again, in rounds, behind students' own submissions.")
    if (n := form_number(request.query_params.get("regraded", ""))) is not None:
        extra.setdefault("done", f"{n} submission(s) queued for regrading, behind "
                                 "students' own")
    if who:
        subs = [s for s in subs if who in s.user.email.lower() or who in s.user.name.lower()]
    if verdict:
        subs = [s for s in subs if (s.verdict or s.status) == verdict]
    extra.setdefault("extensions", extension_service.of_assignment(session=session, assignment=a))
    runs = finals.of_assignment(session=session, assignment=a)[:5]
    extra.setdefault("final_runs", [(r, finals.progress(session=session, run=r)) for r in runs])
    extra.setdefault("final_grades", final_grades.grades(session=session, assignment_id=a.id))
    extra.setdefault("last_deadline", finals.last_deadline(session=session, assignment=a))
    extra.setdefault("practice_limits", practice_service.limits(a))
    extra.setdefault("deadline_zone", when.DEFAULT_ZONE)
    if "deadline_local" not in extra:
        extra["deadline_local"] = when.local_of(a.deadline, extra["deadline_zone"])
    extra.setdefault("zones", when.zones())
    extra.setdefault("profile_cost", practice_service.graded_profile_cost(session=session, assignment=a))
    extra.setdefault("teams", team_service.of_assignment(session=session, assignment=a))
    return render(request, "manage.html", user=user, course=c, role=role, a=a, subs=subs[::-1][:500],
                  scoring=assignment_service.manifest_of(a).scoring,
                  student=who, verdict=verdict, newest=a.versions[-1], **extra)


@router.get("/c/{course}/{slug}/manage")
def manage(course: str, slug: str, request: Request, session: SessionDep,
           user: PageUser) -> HTMLResponse:
    return render_manage(request, session, user, course, slug)


@router.post("/c/{course}/{slug}/manage/policy", dependencies=[Csrf])
def policy(course: str, slug: str, request: Request, session: SessionDep, user: PageUser,
           late_policy: Annotated[str, Form()], late_penalty: Annotated[float, Form()],
           quota_count: Annotated[int, Form()], quota_window_min: Annotated[int, Form()],
           speedup_min: Annotated[float, Form()], speedup_full: Annotated[float, Form()],
           deadline: Annotated[str, Form()] = "", deadline_local: Annotated[str, Form()] = "",
           deadline_zone: Annotated[str, Form()] = when.DEFAULT_ZONE) -> Response:
    """`deadline_local` in `deadline_zone` (the picker), or `deadline` with its own offset."""
    c, _ = course_for(session, user, course)
    a = assignment_service.get(session=session, course=c, slug=slug)
    kept = {"deadline_local": deadline_local or deadline, "deadline_zone": deadline_zone}
    try:
        changes: dict[str, Any] = {
            "deadline": when.moment(deadline_local, deadline_zone, deadline),
            "late_policy": late_policy, "late_penalty": late_penalty,
            "quota_count": quota_count, "quota_window_s": quota_window_min * 60}
        scoring = assignment_service.manifest_of(a).scoring
        if (speedup_min, speedup_full) != (a.speedup_min or scoring.speedup_min,
                                           a.speedup_full or scoring.speedup_full):
            changes |= {"speedup_min": speedup_min, "speedup_full": speedup_full}
        body = AssignmentUpdate(**changes)  # the API's rules
        with committing(session):
            policy_service.update(session=session, actor=user, assignment=a,
                                  role="instructor",
                                  changes=body.model_dump(exclude_unset=True))
    except ValidationError as exc:  # the refused value stays in the form, with its zone
        return render_manage(request, session, user, course, slug, error=reasons(exc),
                             status_code=422, **kept)
    except ValueError as exc:
        return render_manage(request, session, user, course, slug, status_code=422,
                             error=f"deadline: {exc}", **kept)
    except DomainError as exc:
        return render_manage(request, session, user, course, slug, error=exc.message,
                             status_code=exc.status, **kept)
    return RedirectResponse(f"/c/{course}/{slug}/manage?saved=1", status_code=303)


@router.post("/c/{course}/{slug}/manage/regrade-all", dependencies=[Csrf])
def regrade_all(course: str, slug: str, request: Request, session: SessionDep,
                user: PageUser) -> Response:
    c, role = course_for(session, user, course, staff=True)
    a = assignment_service.get(session=session, course=c, slug=slug)
    with committing(session):
        n = submission_service.regrade_all(session=session, actor=user, assignment=a, role=role)
    return RedirectResponse(f"/c/{course}/{slug}/manage?regraded={n}", status_code=303)


@router.post("/c/{course}/{slug}/manage/final-run", dependencies=[Csrf])
def final_run(course: str, slug: str, request: Request, session: SessionDep, user: PageUser,
              settings: SettingsDep, rounds: Annotated[int, Form()] = finals.ROUNDS) -> Response:
    c, role = course_for(session, user, course, staff=True)
    a = assignment_service.get(session=session, course=c, slug=slug)
    try:
        with committing(session):
            finals.start(session=session, assignment=a, actor=user, role=role, rounds=rounds,
                         busy_wait_s=settings.final_busy_wait_s)
    except DomainError as exc:
        return render_manage(request, session, user, course, slug, error=exc.message,
                       status_code=exc.status)
    return RedirectResponse(f"/c/{course}/{slug}/manage?final=1", status_code=303)


@router.get("/c/{course}/{slug}/manage/final-run/{run_id}")
def final_run_page(course: str, slug: str, run_id: RowId, request: Request, session: SessionDep,
                   user: PageUser) -> HTMLResponse:
    """One final run: every turn with what the node delivered, and each student's outcome."""
    c, _ = course_for(session, user, course, staff=True)
    a = assignment_service.get(session=session, course=c, slug=slug)
    run = finals.get(session=session, assignment=a, run_id=run_id)
    return render(request, "final_run.html", user=user, course=c, a=a, run=run,
                  progress=finals.progress(session=session, run=run),
                  turns=[(t, email, finals.node_state(t))
                         for t, email in finals.turns(session=session, run=run)],
                  grades=finals.standings(session=session, run=run))


@router.post("/c/{course}/{slug}/manage/final-run/{run_id}/cancel", dependencies=[Csrf])
def final_run_cancel(course: str, slug: str, run_id: RowId, request: Request, session: SessionDep,
                     user: PageUser) -> Response:
    c, role = course_for(session, user, course, staff=True)
    a = assignment_service.get(session=session, course=c, slug=slug)
    try:
        with committing(session):
            run = finals.get(session=session, assignment=a, run_id=run_id)
            finals.cancel(session=session, run=run, actor=user, role=role)
    except DomainError as exc:
        return render_manage(request, session, user, course, slug, error=exc.message,
                       status_code=exc.status)
    return RedirectResponse(f"/c/{course}/{slug}/manage?saved=1", status_code=303)


@router.post("/c/{course}/{slug}/manage/extensions", dependencies=[Csrf])
def grant_extension(course: str, slug: str, request: Request, session: SessionDep,
                    user: PageUser, email: Annotated[str, Form()],
                    deadline: Annotated[str, Form()], reason: Annotated[str, Form()] = ""
                    ) -> Response:
    c, role = course_for(session, user, course)
    a = assignment_service.get(session=session, course=c, slug=slug)
    try:
        body = ExtensionCreate(deadline=datetime.fromisoformat(deadline.strip()), reason=reason)
        with committing(session):
            extension_service.grant(session=session, actor=user, assignment=a, role=role,
                                    email=email, deadline=body.deadline, reason=body.reason)
    except ValidationError as exc:
        return render_manage(request, session, user, course, slug, error=reasons(exc),
                       status_code=422)
    except ValueError:
        return render_manage(request, session, user, course, slug, status_code=422,
                       error="extension: use a date and time with a zone, "
                             "e.g. 2026-12-03T23:59+01:00")
    except DomainError as exc:
        return render_manage(request, session, user, course, slug, error=exc.message,
                       status_code=exc.status)
    return RedirectResponse(f"/c/{course}/{slug}/manage?saved=1", status_code=303)


@router.post("/c/{course}/{slug}/manage/extensions/revoke", dependencies=[Csrf])
def revoke_extension(course: str, slug: str, request: Request, session: SessionDep,
                     user: PageUser, email: Annotated[str, Form()]) -> Response:
    c, role = course_for(session, user, course)
    a = assignment_service.get(session=session, course=c, slug=slug)
    try:
        with committing(session):
            extension_service.revoke(session=session, actor=user, assignment=a, role=role,
                                     email=email)
    except DomainError as exc:
        return render_manage(request, session, user, course, slug, error=exc.message,
                       status_code=exc.status)
    return RedirectResponse(f"/c/{course}/{slug}/manage?saved=1", status_code=303)


def render_members(request: Request, session: SessionDep, user: User, course: str,
             status_code: int = 200, **extra: Any) -> HTMLResponse:
    c, role = course_for(session, user, course, staff=True)
    return render(request, "members.html", status_code=status_code, user=user, course=c,
                  role=role, members=course_service.members(session=session, course=c),
                  late_left=late_days.left_by_email(session=session, course=c), **extra)


@router.get("/c/{course}/-/members")
def members_page(course: str, request: Request, session: SessionDep,
                 user: PageUser) -> HTMLResponse:
    """The course's people (staff); instructors change roles and import the roster here."""
    return render_members(request, session, user, course)


@router.post("/c/{course}/-/members/role", dependencies=[Csrf])
def set_role(course: str, request: Request, session: SessionDep, user: PageUser,
             email: Annotated[str, Form()], role: Annotated[str, Form()]) -> Response:
    c, mine = course_for(session, user, course)
    try:
        with committing(session):
            course_service.set_role(session=session, actor=user, course=c, role=mine,
                                    email=email, new_role=role)
    except DomainError as exc:
        return render_members(request, session, user, course, status_code=exc.status,
                        error=exc.message)
    return RedirectResponse(f"/c/{course}/-/members", status_code=303)


@router.post("/c/{course}/-/members/roster", dependencies=[Csrf])
def import_roster(course: str, request: Request, session: SessionDep, user: PageUser,
                  roster: Annotated[UploadFile, File()]) -> Response:
    """Import a roster CSV and show what became of each row (nothing is stored on an error)."""
    c, role = course_for(session, user, course)
    limit = course_service.MAX_ROSTER_BYTES
    data = roster.file.read(limit + 1)
    try:
        if len(data) > limit:
            raise Invalid(f"roster larger than {limit} bytes")
        with committing(session):
            rows = course_service.import_roster(session=session, actor=user, course=c,
                                                role=role, data=data)
    except DomainError as exc:
        return render_members(request, session, user, course, status_code=exc.status,
                        error=exc.message)
    return render_members(request, session, user, course, report=rows)


def _similarity(request: Request, session: SessionDep, user: User, course: str, slug: str,
                status_code: int = 200, **extra: Any) -> HTMLResponse:
    c, _ = course_for(session, user, course, staff=True)
    a = assignment_service.get(session=session, course=c, slug=slug)
    return render(request, "similarity.html", status_code=status_code, user=user, course=c, a=a,
                  runs=similarity_service.of_assignment(session=session, assignment=a), **extra)


@router.get("/c/{course}/{slug}/similarity")
def similarity_page(course: str, slug: str, request: Request, session: SessionDep,
                    user: PageUser) -> HTMLResponse:
    """The assignment's similarity runs and a form to start one (the course's staff)."""
    return _similarity(request, session, user, course, slug)


@router.post("/c/{course}/{slug}/similarity", dependencies=[Csrf])
def start_similarity(course: str, slug: str, request: Request, session: SessionDep,
                     user: PageUser, basis: Annotated[str, Form()] = "latest",
                     threshold: Annotated[float, Form()] = 0.5) -> Response:
    c, role = course_for(session, user, course, staff=True)
    a = assignment_service.get(session=session, course=c, slug=slug)
    try:
        body = SimilarityCreate(basis=basis, threshold=threshold)  # type: ignore[arg-type]
        with committing(session):
            run = similarity_service.start(session=session, actor=user, assignment=a, role=role,
                                           basis=body.basis, threshold=body.threshold)
            run_id = run.id
    except ValidationError as exc:
        return _similarity(request, session, user, course, slug, status_code=422,
                           error=reasons(exc))
    except DomainError as exc:
        return _similarity(request, session, user, course, slug, status_code=exc.status,
                           error=exc.message)
    return RedirectResponse(f"/c/{course}/{slug}/similarity/{run_id}", status_code=303)


@router.get("/c/{course}/{slug}/similarity/{run_id}")
def similarity_run(course: str, slug: str, run_id: RowId, request: Request, session: SessionDep,
                   user: PageUser) -> HTMLResponse:
    """One run's pairs, most similar first (the page reloads itself until the run is done)."""
    c, _ = course_for(session, user, course, staff=True)
    a = assignment_service.get(session=session, course=c, slug=slug)
    run = similarity_service.get(session=session, assignment=a, run_id=run_id)
    found = similarity_service.pairs(run)
    who = {sid: f"{u.name} <{u.email}>"
           for sid, u in similarity_service.owners(session=session, found=found).items()}
    return render(request, "similarity_run.html", user=user, course=c, a=a, run=run,
                  pairs=found, who=who)


@router.get("/c/{course}/{slug}/similarity/{run_id}/{n}")
def similarity_pair(course: str, slug: str, run_id: RowId, n: RowId, request: Request,
                    session: SessionDep, settings: SettingsDep, user: PageUser) -> HTMLResponse:
    """The n-th pair side by side, the matching lines marked."""
    c, _ = course_for(session, user, course, staff=True)
    a = assignment_service.get(session=session, course=c, slug=slug)
    run = similarity_service.get(session=session, assignment=a, run_id=run_id)
    left, right = similarity_service.side_by_side(session=session, run=run, index=n - 1,
                                                  artifacts_root=settings.artifacts_dir)
    return render(request, "similarity_pair.html", user=user, course=c, a=a, run=run, n=n,
                  left=left, right=right)


@router.post("/s/{submission_id}/regrade", dependencies=[Csrf])
def regrade(submission_id: RowId, session: SessionDep, user: PageUser) -> Response:
    return act_on_submission(submission_id, session, user, submission_service.regrade)


@router.get("/fleet")
def fleet(request: Request, session: SessionDep, settings: SettingsDep, user: PageUser,
          dispatcher: DispatcherDep) -> HTMLResponse:
    if not user.is_instructor:
        raise Forbidden("instructors only")
    runners, queues = fleet_service.fleet(session=session, live_s=settings.runner_live_s,
                                          broker_depth=dispatcher.depth())
    return render(request, "fleet.html", user=user, runners=runners,
                  queues=queues, node_state=fleet_service.node_state)
