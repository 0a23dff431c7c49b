"""Pages of grading by a person: the staff's rubric and queue (/c/COURSE/SLUG/grading), one
student's grade beside their code (…/grading/ID), and a student's released feedback with the
whole rubric and the comments at their lines (…/feedback; regrade requests are
server/web/regrades.py's). The same services as the API (services/by_hand/manual.py, rubric.py,
regrade_requests.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from markupsafe import Markup
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from server.api import RowId
from server.api.manual import CommentIn, ItemIn, RulesIn
from server.db import committing
from server.deps import SessionDep, SettingsDep
from server.models import Assignment, Course, ManualGrade, User
from server.services.by_hand import manual, regrade_requests, rubric
from server.services.grades import grading as grading_service
from server.services.packages import assignments as assignment_service
from server.services.people import courses as course_service
from server.services.records import manual_points
from server.services.records.errors import DomainError, Forbidden
from server.web import code_view
from server.web.admin import course_for
from server.web.plots import scaling_svg
from server.web.plumbing import Csrf, PageUser, form_number, reasons, render

router = APIRouter(include_in_schema=False)
G = "/c/{course}/{slug}/grading"


def _staff(session: Session, user: User, course: str, slug: str
           ) -> tuple[Course, str, Assignment]:
    c, role = course_for(session, user, course, staff=True)
    return c, role, assignment_service.get(session=session, course=c, slug=slug)


def _queue(request: Request, session: Session, user: User, course: str, slug: str,
           **extra: Any) -> HTMLResponse:
    c, role, a = _staff(session, user, course, slug)
    grades = list(session.scalars(select(ManualGrade).where(ManualGrade.assignment_id == a.id)
                                  .order_by(ManualGrade.id)))
    people = {u.id: u for u in session.scalars(select(User).where(
        User.id.in_([g.user_id for g in grades] + [g.locked_by or 0 for g in grades])))}
    totals = {g.id: manual_points.points(a, manual.applied(session=session, grade=g))
              for g in grades}
    waiting = len(manual.graded_submissions(session=session, assignment=a))
    return render(request, "grading.html", user=user, course=c, role=role, a=a,
                  items=rubric.items(session=session, assignment=a), grades=grades,
                  warning=rubric.over_the_most(session=session, assignment=a),
                  people=people, totals=totals, students=waiting,
                  who={g.id: manual.label(a, g, people[g.user_id]) for g in grades},
                  done=sum(g.status == "done" for g in grades),
                  confirm_release=extra.pop("confirm_release", None), **extra)


def _act(request: Request, session: Session, user: User, course: str, slug: str,
         action: Callable[[Course, str, Assignment], str]) -> Response:
    """Run `action` (a form's work) and go where it says; its refusal shows on the queue page."""
    c, role, a = _staff(session, user, course, slug)
    try:
        with committing(session):
            to = action(c, role, a)
    except ValidationError as exc:
        return _queue(request, session, user, course, slug, error=reasons(exc),
                      status_code=422)
    except DomainError as exc:
        return _queue(request, session, user, course, slug, error=exc.message,
                      status_code=exc.status)
    return RedirectResponse(to, status_code=303)


@router.get(G)
def queue(course: str, slug: str, request: Request, session: SessionDep,
          user: PageUser) -> HTMLResponse:
    return _queue(request, session, user, course, slug)


@router.post(G + "/next", dependencies=[Csrf])
def take_next(course: str, slug: str, request: Request, session: SessionDep,
              user: PageUser) -> Response:
    def act(c: Course, role: str, a: Assignment) -> str:
        g = manual.next_ungraded(session=session, assignment=a, grader=user, role=role)
        return f"/c/{c.slug}/{a.slug}/grading" + (f"/{g.id}" if g else "?none=1")
    return _act(request, session, user, course, slug, act)


@router.post(G + "/items", dependencies=[Csrf])
def add_item(course: str, slug: str, request: Request, session: SessionDep, user: PageUser,
             title: Annotated[str, Form()], points: Annotated[float, Form()],
             group: Annotated[str, Form()] = "", description: Annotated[str, Form()] = ""
             ) -> Response:
    def act(c: Course, role: str, a: Assignment) -> str:
        body = ItemIn(title=title, points=points, group=group, description=description)
        rubric.add(session=session, assignment=a, actor=user, role=role, **body.model_dump())
        return f"/c/{c.slug}/{a.slug}/grading"
    return _act(request, session, user, course, slug, act)


@router.post(G + "/items/{item_id}", dependencies=[Csrf])
def edit_item(course: str, slug: str, item_id: RowId, request: Request, session: SessionDep,
              user: PageUser, points: Annotated[float, Form()],
              title: Annotated[str, Form()], confirm: Annotated[str, Form()] = "") -> Response:
    """Change an item's points or title: the first post says how many grades it changes, the
    second (confirm) saves."""
    _, _, a = _staff(session, user, course, slug)
    item = rubric.get(session=session, assignment=a, item_id=item_id)
    if not confirm:
        n = rubric.uses(session=session, item=item)
        return _queue(request, session, user, course, slug, confirm_item=item,
                      confirm_points=points, confirm_title=title, confirm_changes=n)

    def act(c: Course, role: str, a: Assignment) -> str:
        rubric.edit(session=session, assignment=a, item=item, actor=user, role=role,
                    points=points, title=title)
        return f"/c/{c.slug}/{a.slug}/grading"
    return _act(request, session, user, course, slug, act)


@router.post(G + "/rules", dependencies=[Csrf])
def rules(course: str, slug: str, request: Request, session: SessionDep, user: PageUser,
          points: Annotated[float, Form()], weight: Annotated[float, Form()],
          regrade_limit: Annotated[int, Form()], anonymous: Annotated[str, Form()] = ""
          ) -> Response:
    def act(c: Course, role: str, a: Assignment) -> str:
        body = RulesIn(points=points, weight=weight, regrade_limit=regrade_limit,
                       anonymous=anonymous == "on")
        rubric.configure(session=session, assignment=a, actor=user, role=role,
                         **body.model_dump())
        return f"/c/{c.slug}/{a.slug}/grading"
    return _act(request, session, user, course, slug, act)


@router.post(G + "/release", dependencies=[Csrf])
def release(course: str, slug: str, request: Request, session: SessionDep, user: PageUser,
            released: Annotated[str, Form()] = "yes",
            confirm: Annotated[str, Form()] = "") -> Response:
    """Release the grades that are done: the first post asks, saying how many, the second
    (confirm) releases. Withholding them again asks nothing."""
    if released == "yes" and confirm != "yes":
        _, _, a = _staff(session, user, course, slug)
        n = manual.done_count(session=session, assignment=a)
        return _queue(request, session, user, course, slug, confirm_release=n)

    def act(c: Course, role: str, a: Assignment) -> str:
        manual.release(session=session, assignment=a, actor=user, role=role,
                       released=released == "yes")
        return f"/c/{c.slug}/{a.slug}/grading"
    return _act(request, session, user, course, slug, act)


@router.get(G + "/{grade_id}")
def grade_page(course: str, slug: str, grade_id: RowId, request: Request, session: SessionDep,
               settings: SettingsDep, user: PageUser) -> HTMLResponse:
    return _grade_page(request, session, settings.artifacts_dir, user, course, slug, grade_id)


def _grade_page(request: Request, session: Session, artifacts: Path, user: User, course: str,
                slug: str, grade_id: int, **extra: Any) -> HTMLResponse:
    c, _, a = _staff(session, user, course, slug)
    g = manual.get(session=session, assignment=a, grade_id=grade_id)
    on = {i.id for i in manual.applied(session=session, grade=g)}
    items = rubric.items(session=session, assignment=a)
    student = session.get(User, g.user_id)
    holder = session.get(User, g.locked_by) if g.locked_by else None
    row = grading_service.report_of(session=session, submission_id=g.submission_id)
    report = None if row is None else row.report
    assert student is not None
    return render(request, "grade.html", user=user, course=c, a=a, g=g, items=items, on=on,
                  student=student, who=manual.label(a, g, student), holder=holder,
                  report=report,
                  plot=Markup(scaling_svg(report["scaling"])) if report and report.get("scaling")
                  else "",
                  total=manual_points.points(a, [i for i in items if i.id in on]),
                  files={name: code_view.highlighted(name, lines) for name, lines in
                         manual.sources(submission=g.submission, artifacts_root=artifacts).items()},
                  comments=manual.comments(session=session, grade=g), **extra)


def _on_grade(request: Request, session: Session, user: User, course: str, slug: str,
              grade_id: int, work: Callable[[ManualGrade, str], None], anchor: str = ""
              ) -> Response:
    """A change to one grade; a refusal comes back on its page (never through the address: a
    link cannot put words in the page's error box)."""
    c, role, a = _staff(session, user, course, slug)
    artifacts = request.app.state.settings.artifacts_dir
    try:
        with committing(session):
            work(manual.get(session=session, assignment=a, grade_id=grade_id), role)
    except ValidationError as exc:
        return _grade_page(request, session, artifacts, user, course, slug, grade_id,
                           error=reasons(exc), status_code=422)
    except DomainError as exc:
        return _grade_page(request, session, artifacts, user, course, slug, grade_id,
                           error=exc.message, status_code=exc.status)
    return RedirectResponse(f"/c/{c.slug}/{a.slug}/grading/{grade_id}{anchor}", status_code=303)


@router.post(G + "/{grade_id}/items/{item_id}", dependencies=[Csrf])
def toggle(course: str, slug: str, grade_id: RowId, item_id: RowId, request: Request,
           session: SessionDep, user: PageUser, applied: Annotated[str, Form()]) -> Response:
    def work(g: ManualGrade, role: str) -> None:
        a = session.get(Assignment, g.assignment_id)
        assert a is not None
        item = rubric.get(session=session, assignment=a, item_id=item_id)
        manual.apply(session=session, grade=g, item=item, grader=user, role=role,
                     applied=applied == "yes")
    return _on_grade(request, session, user, course, slug, grade_id, work, "#rubric")


@router.post(G + "/{grade_id}/comments", dependencies=[Csrf])
def comment(course: str, slug: str, grade_id: RowId, request: Request, session: SessionDep,
            settings: SettingsDep, user: PageUser, body: Annotated[str, Form()],
            file: Annotated[str, Form()] = "", line: Annotated[str, Form()] = "") -> Response:
    def work(g: ManualGrade, role: str) -> None:
        c = CommentIn(body=body, file=file or None, line=form_number(line))
        manual.comment(session=session, grade=g, grader=user, role=role, body=c.body,
                       file=c.file, line=c.line, artifacts_root=settings.artifacts_dir)
    return _on_grade(request, session, user, course, slug, grade_id, work,
                     f"#L-{file}-{line}" if file and line else "#comments")


@router.post(G + "/{grade_id}/done", dependencies=[Csrf])
def done(course: str, slug: str, grade_id: RowId, request: Request, session: SessionDep,
         user: PageUser, done: Annotated[str, Form()] = "yes") -> Response:
    """Finish the grade (and open the next student's not done, or the queue saying all are),
    or open it again."""
    following: list[ManualGrade | None] = []

    def work(g: ManualGrade, role: str) -> None:
        manual.finish(session=session, grade=g, grader=user, role=role, done=done == "yes")
        if done == "yes":
            a = session.get(Assignment, g.assignment_id)
            assert a is not None
            following.append(manual.next_ungraded(session=session, assignment=a, grader=user,
                                                  role=role))
    answer = _on_grade(request, session, user, course, slug, grade_id, work)
    if not following or not isinstance(answer, RedirectResponse):
        return answer
    base = f"/c/{course}/{slug}/grading"
    nxt = following[0]
    return RedirectResponse(f"{base}/{nxt.id}" if nxt is not None else f"{base}?all=1",
                            status_code=303)


def _feedback(request: Request, session: Session, settings: Any, user: User, course: str,
              slug: str, **extra: Any) -> HTMLResponse:
    c, role = course_service.with_role(session=session, slug=course, user=user)
    if role is None:
        raise Forbidden("you are not enrolled in this course")
    a = assignment_service.get(session=session, course=c, slug=slug)
    f = manual.feedback(session=session, assignment=a, user=user)
    at: dict[tuple[str, int], list[Any]] = {}
    for x in f.comments:
        if x.file is not None and x.line is not None:
            at.setdefault((x.file, x.line), []).append(x)
    row = grading_service.report_of(session=session, submission_id=f.grade.submission_id)
    report = None if row is None else row.report
    return render(request, "feedback.html", user=user, course=c, a=a, f=f, at=at,
                  tests=[t["name"] for t in (report or {}).get("tests", [])],
                  general=[x for x in f.comments if x.file is None],
                  files=manual.sources(submission=f.grade.submission,
                                       artifacts_root=settings.artifacts_dir),
                  rubric=[(i, i.id in {x.id for x in f.items})
                          for i in rubric.items(session=session, assignment=a)],
                  requests=regrade_requests.of_student(session=session, assignment=a, student=user),
                  subject=regrade_requests.subject, **extra)


@router.get("/c/{course}/{slug}/feedback")
def feedback(course: str, slug: str, request: Request, session: SessionDep,
             settings: SettingsDep, user: PageUser) -> HTMLResponse:
    return _feedback(request, session, settings, user, course, slug)
