"""Regrade requests: a student asks the course's staff for a second look at one rubric item or
one test of their released manual grade, with a reason; the staff see every open request of the
course in one list and answer, changing the grade (an item applied or taken off) or not. A
student has at most the assignment's `regrade_limit` requests open at once; each step is in the
audit log."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from server import db
from server.models import (
    Assignment,
    AuditLog,
    Course,
    GradeReportRow,
    ManualGrade,
    RegradeRequest,
    RubricItem,
    TestResultRow,
    User,
    now,
)
from server.services.by_hand import manual
from server.services.people import courses
from server.services.records.errors import Conflict, Forbidden, Invalid, NotFound

MAX_REASON_CHARS = 3000


def _log(session: Session, actor: User, action: str, request: RegradeRequest,
         moved: tuple[float, float] | None = None) -> None:
    """`moved`: the grade's points before and after the answer changed its item."""
    detail: dict[str, object] = {"grade": request.grade_id, "item": request.item_id,
                                 "test": request.test_name, "changed": request.changed}
    if moved is not None:
        detail["points_before"], detail["points_after"] = moved
    session.add(AuditLog(actor_id=actor.id, action=action, target=f"regrade/{request.id}",
                         detail=detail))


def ask(*, session: Session, assignment: Assignment, student: User, role: str | None,
        reason: str, item_id: int | None = None, test_name: str | None = None
        ) -> RegradeRequest:
    """A request about one item or one test of the student's own released grade."""
    if role != "student":
        raise Forbidden("regrade requests are a student's, about their own grade")
    grade = manual.feedback(session=session, assignment=assignment, user=student).grade
    if (item_id is None) == (test_name is None):
        raise Invalid("a regrade request is about one rubric item or one test")
    if not reason.strip():
        raise Invalid("say why the grade should change")
    if len(reason) > MAX_REASON_CHARS:
        raise Invalid(f"a reason holds at most {MAX_REASON_CHARS} characters")
    if item_id is not None:
        item = session.get(RubricItem, item_id)
        if item is None or item.assignment_id != assignment.id:
            raise NotFound(f"no rubric item {item_id} in {assignment.slug}")
    if test_name is not None and session.scalar(
            select(TestResultRow.id).join(GradeReportRow, GradeReportRow.id == TestResultRow.report_id)
            .where(TestResultRow.name == test_name,
                   GradeReportRow.submission_id == grade.submission_id).limit(1)) is None:
        raise NotFound(f"the graded submission has no test {test_name!r}")
    # The student's requests one at a time: the count and the insert see each other.
    db.hold(session, ManualGrade, grade.id)
    open_now = session.scalar(select(func.count()).select_from(RegradeRequest).where(
        RegradeRequest.user_id == student.id, RegradeRequest.status == "open",
        RegradeRequest.grade_id == grade.id)) or 0
    if open_now >= assignment.regrade_limit:
        raise Conflict(f"you have {open_now} regrade request(s) open for {assignment.slug}, "
                       f"the most this assignment allows: wait for an answer")
    request = RegradeRequest(grade_id=grade.id, user_id=student.id, item_id=item_id,
                             test_name=test_name, reason=reason)
    session.add(request)
    session.flush()
    _log(session, student, "regrade.ask", request)
    return request


def of_course(*, session: Session, course: Course, role: str | None,
              status: str | None = "open"
              ) -> list[tuple[RegradeRequest, ManualGrade, str, str]]:
    """The course's requests (open ones by default), oldest first, for its staff: each with
    its grade, whose it is (manual.label: "student N" where the assignment is graded
    anonymously) and its assignment's slug."""
    if not courses.is_staff(role):
        raise Forbidden("only the course's instructors and TAs read regrade requests")
    q = (select(RegradeRequest, ManualGrade, User, Assignment)
         .join(ManualGrade, ManualGrade.id == RegradeRequest.grade_id)
         .join(Assignment, Assignment.id == ManualGrade.assignment_id)
         .join(User, User.id == RegradeRequest.user_id)
         .where(Assignment.course_id == course.id).order_by(RegradeRequest.id))
    if status is not None:
        q = q.where(RegradeRequest.status == status)
    return [(r, g, manual.label(a, g, u), a.slug) for r, g, u, a in session.execute(q).all()]


def of_student(*, session: Session, assignment: Assignment, student: User
               ) -> list[RegradeRequest]:
    """The requests about the student's grade: theirs, and their teammates' about the team's."""
    grade = manual.grade_of(session=session, assignment=assignment, user_id=student.id)
    if grade is None:
        return []
    return list(session.scalars(select(RegradeRequest).where(RegradeRequest.grade_id == grade.id)
                                .order_by(RegradeRequest.id)))


def get(*, session: Session, course: Course, request_id: int) -> RegradeRequest:
    found = session.execute(
        select(RegradeRequest).join(ManualGrade, ManualGrade.id == RegradeRequest.grade_id)
        .join(Assignment, Assignment.id == ManualGrade.assignment_id)
        .where(RegradeRequest.id == request_id, Assignment.course_id == course.id)).scalar()
    if found is None:
        raise NotFound(f"no regrade request {request_id} in {course.slug}")
    return found


def answer(*, session: Session, request: RegradeRequest, actor: User, role: str | None,
           text: str, apply_item: bool | None = None) -> None:
    """Answer a request; `apply_item` (requests about an item): apply it (True) or take it off
    (False), changing the grade; None leaves the grade as it is."""
    if not courses.is_staff(role):
        raise Forbidden("only the course's instructors and TAs answer regrade requests")
    if request.status != "open":
        raise Conflict(f"regrade request {request.id} was answered already")
    if not text.strip():
        raise Invalid("an answer needs some text")
    if len(text) > MAX_REASON_CHARS:
        raise Invalid(f"an answer holds at most {MAX_REASON_CHARS} characters")
    grade = session.get(ManualGrade, request.grade_id)
    assert grade is not None
    moved = None
    if apply_item is not None:
        if request.item_id is None:
            raise Invalid("this request is about a test, not a rubric item: answer it without "
                          "changing an item (or regrade the submission)")
        item = session.get(RubricItem, request.item_id)
        if item is None:
            raise NotFound("the item the request is about was deleted")
        before = item.id in {i.id for i in manual.applied(session=session, grade=grade)}
        if before != apply_item:
            moved = manual.amend(session=session, grade=grade, item=item, grader=actor,
                                 role=role, applied=apply_item)
            request.changed = True
    request.status, request.answer, request.answered_by = "answered", text, actor.id
    request.answered_at = now()
    session.flush()
    _log(session, actor, "regrade.answer", request, moved)
