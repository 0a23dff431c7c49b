"""Regrade requests, for every course: a student asks the course's staff for a second look at the
grade they can see, with a reason, about one rubric item (applied or not), one test, or the
performance points. The grade stands on one submission (`standing`): the one their released hand
grade read, else the one their board counts, else their latest graded one; no hand grading is
needed. The staff see every open request of the course in one list, each named in words
(`subject`), and answer: apply or take off any rubric item of the grade, queue the submission to
be graded again by the autograder, or neither. A student has at most the assignment's
`regrade_limit` requests open at once (a team's together); each step is in the audit log."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from runners.protocol import Scoring
from server import db
from server.models import (
    Assignment,
    AuditLog,
    BoardEntry,
    Course,
    GradeReportRow,
    ManualGrade,
    RegradeRequest,
    RubricItem,
    Submission,
    TestResultRow,
    User,
    now,
)
from server.services.by_hand import manual, rubric
from server.services.intake import submissions
from server.services.notices import notify
from server.services.people import courses, teams
from server.services.records.errors import Conflict, Forbidden, Invalid, NotFound

MAX_REASON_CHARS = 3000


@dataclass(frozen=True)
class Standing:
    """The submission a student's grade stands on, and its released hand grade if any."""

    submission: Submission
    grade: ManualGrade | None


@dataclass(frozen=True)
class Listed:
    """One request as the staff's list shows it."""

    request: RegradeRequest
    student: str
    """Whose it is (manual.label: "student N" where the assignment is graded anonymously)."""
    slug: str
    subject: str


def standing(*, session: Session, assignment: Assignment, user_id: int) -> Standing | None:
    """The submission the student's visible grade stands on (None: nothing graded yet)."""
    grade = manual.grade_of(session=session, assignment=assignment, user_id=user_id)
    if grade is not None and assignment.manual_released_at is not None and grade.status == "done":
        sub = session.get(Submission, grade.submission_id)
        if sub is not None:
            return Standing(sub, grade)
    entry = session.get(BoardEntry, (assignment.id, user_id))
    sub = session.get(Submission, entry.submission_id) if entry is not None else None
    if sub is None:
        sub = session.scalar(select(Submission).where(
            Submission.assignment_id == assignment.id, Submission.status == "graded",
            teams.shared(user_id)).order_by(Submission.id.desc()).limit(1))
    return Standing(sub, None) if sub is not None else None


@dataclass(frozen=True)
class Choices:
    """What a student may ask about: the grade's submission, its tests (name, outcome), the
    whole rubric (each item with whether their released grade applied it: None before a
    release), and whether performance points are at stake; their requests, and how many more
    they may open."""

    standing: Standing | None
    tests: list[tuple[str, str]]
    items: list[tuple[RubricItem, bool | None]]
    performance: bool
    requests: list[RegradeRequest]
    may_open: int


def choices(*, session: Session, assignment: Assignment, student: User) -> Choices:
    """What the student's regrade page offers."""
    found = standing(session=session, assignment=assignment, user_id=student.id)
    mine = of_student(session=session, assignment=assignment, student=student)
    may_open = max(assignment.regrade_limit - sum(r.status == "open" for r in mine), 0)
    if found is None:
        return Choices(None, [], [], False, mine, may_open)
    tests = [(t.name, t.outcome) for t in session.scalars(
        select(TestResultRow).join(GradeReportRow, GradeReportRow.id == TestResultRow.report_id)
        .where(GradeReportRow.submission_id == found.submission.id).order_by(TestResultRow.id))]
    on = ({i.id for i in manual.applied(session=session, grade=found.grade)}
          if found.grade is not None else None)
    items = [(i, None if on is None else i.id in on)
             for i in rubric.items(session=session, assignment=assignment)]
    scoring = found.submission.version.manifest.get("scoring", {})
    at_stake = float(scoring.get("performance_points", Scoring().performance_points)) > 0
    return Choices(found, tests, items, at_stake, mine, may_open)


def grade_items(*, session: Session, request: RegradeRequest
                ) -> tuple[ManualGrade | None, list[tuple[RubricItem, bool]]]:
    """For the staff's answer: the hand grade of the request's submission (None: not graded by
    hand) and every rubric item of its assignment with whether that grade applies it."""
    grade = _hand_grade(session, request)
    on = {i.id for i in manual.applied(session=session, grade=grade)} if grade else set()
    a = session.get(Assignment, request.assignment_id)
    assert a is not None
    return grade, [(i, i.id in on) for i in rubric.items(session=session, assignment=a)]


def _hand_grade(session: Session, request: RegradeRequest) -> ManualGrade | None:
    if request.grade_id is not None:
        return session.get(ManualGrade, request.grade_id)
    return session.scalar(select(ManualGrade).where(
        ManualGrade.submission_id == request.submission_id).limit(1))


def subject(request: RegradeRequest) -> str:
    """What the request is about, in words."""
    if request.performance:
        return "the performance points"
    if request.test_name is not None:
        return f"the test {request.test_name}"
    return f"the rubric item \u201c{request.item_title or 'a deleted item'}\u201d"


def _log(session: Session, actor: User, action: str, request: RegradeRequest,
         moved: list[dict[str, object]] | None = None) -> None:
    """`moved`: each item the answer applied or took off, with the grade's points around it."""
    detail: dict[str, object] = {"submission": request.submission_id, "grade": request.grade_id,
                                 "item": request.item_id, "test": request.test_name,
                                 "performance": request.performance, "changed": request.changed,
                                 "requeued": request.requeued}
    if moved:
        detail["items"] = moved
    session.add(AuditLog(actor_id=actor.id, action=action, target=f"regrade/{request.id}",
                         detail=detail))


def _check_text(text: str, empty: str) -> None:
    if not text.strip():
        raise Invalid(empty)
    if len(text) > MAX_REASON_CHARS:
        raise Invalid(f"it holds at most {MAX_REASON_CHARS} characters")


def ask(*, session: Session, assignment: Assignment, student: User, role: str | None,
        reason: str, item_id: int | None = None, test_name: str | None = None,
        performance: bool = False) -> RegradeRequest:
    """A request about one rubric item, one test or the performance points of the grade the
    student can see."""
    if role != "student":
        raise Forbidden("regrade requests are a student's, about their own grade")
    if sum((item_id is not None, test_name is not None, performance)) != 1:
        raise Invalid("a regrade request is about one rubric item, one test, or the performance "
                      "points")
    _check_text(reason, "say why the grade should change")
    found = standing(session=session, assignment=assignment, user_id=student.id)
    if found is None:
        raise NotFound(f"you have no graded submission of {assignment.slug} yet: a regrade "
                       "request is about a grade you can see")
    sub = found.submission
    title = None
    if item_id is not None:
        item = session.get(RubricItem, item_id)
        if item is None or item.assignment_id != assignment.id:
            raise NotFound(f"no rubric item {item_id} in {assignment.slug}")
        title = item.title
    if test_name is not None and session.scalar(
            select(TestResultRow.id).join(GradeReportRow, GradeReportRow.id == TestResultRow.report_id)
            .where(TestResultRow.name == test_name,
                   GradeReportRow.submission_id == sub.id).limit(1)) is None:
        raise NotFound(f"the graded submission has no test {test_name!r}")
    # A submission's requests one at a time: the count and the insert see each other.
    db.hold(session, Submission, sub.id)
    open_now = session.scalar(select(func.count()).select_from(RegradeRequest).join(
        Submission, Submission.id == RegradeRequest.submission_id).where(
        RegradeRequest.assignment_id == assignment.id, RegradeRequest.status == "open",
        teams.shared(student.id))) or 0
    if open_now >= assignment.regrade_limit:
        raise Conflict(f"you have {open_now} regrade request(s) open for {assignment.slug}, "
                       f"the most this assignment allows: wait for an answer")
    request = RegradeRequest(assignment_id=assignment.id, submission_id=sub.id,
                             grade_id=found.grade.id if found.grade else None, user_id=student.id,
                             item_id=item_id, item_title=title, test_name=test_name,
                             performance=performance, reason=reason)
    session.add(request)
    session.flush()
    _log(session, student, "regrade.ask", request)
    return request


def of_course(*, session: Session, course: Course, role: str | None,
              status: str | None = "open") -> list[Listed]:
    """The course's requests (open ones by default), oldest first, for its staff."""
    if not courses.is_staff(role):
        raise Forbidden("only the course's instructors and TAs read regrade requests")
    q = (select(RegradeRequest, User, Assignment)
         .join(Assignment, Assignment.id == RegradeRequest.assignment_id)
         .join(User, User.id == RegradeRequest.user_id)
         .where(Assignment.course_id == course.id).order_by(RegradeRequest.id))
    if status is not None:
        q = q.where(RegradeRequest.status == status)
    out = []
    for r, u, a in session.execute(q).all():
        grade = session.get(ManualGrade, r.grade_id) if r.grade_id is not None else None
        if grade is not None:
            who = manual.label(a, grade, u)
        else:  # a grade by the autograder alone: named as the grading surfaces name students
            sub = session.get(Submission, r.submission_id)
            team = sub.team if sub is not None else None
            who = (f"a student (request {r.id})" if a.manual_anonymous else
                   f"{u.email} (team {team.name})" if team is not None else u.email)
        out.append(Listed(r, who, a.slug, subject(r)))
    return out


def of_student(*, session: Session, assignment: Assignment, student: User
               ) -> list[RegradeRequest]:
    """The requests about the student's grades: theirs, and their teammates' about the team's."""
    return list(session.scalars(select(RegradeRequest).join(
        Submission, Submission.id == RegradeRequest.submission_id).where(
        RegradeRequest.assignment_id == assignment.id, teams.shared(student.id))
        .order_by(RegradeRequest.id)))


def get(*, session: Session, course: Course, request_id: int) -> RegradeRequest:
    found = session.execute(
        select(RegradeRequest).join(Assignment, Assignment.id == RegradeRequest.assignment_id)
        .where(RegradeRequest.id == request_id, Assignment.course_id == course.id)).scalar()
    if found is None:
        raise NotFound(f"no regrade request {request_id} in {course.slug}")
    return found


def answer(*, session: Session, request: RegradeRequest, actor: User, role: str | None,
           text: str, items: dict[int, bool] | None = None, apply_item: bool | None = None,
           regrade: bool = False) -> None:
    """Answer a request. `items`: rubric items of the grade to apply (True) or take off
    (False), any of them; `apply_item`: the same for the item asked about; `regrade`: queue the
    submission to be graded again by the autograder (on the assignment's current version)."""
    if not courses.is_staff(role):
        raise Forbidden("only the course's instructors and TAs answer regrade requests")
    if request.status != "open":
        raise Conflict(f"regrade request {request.id} was answered already")
    _check_text(text, "an answer needs some text")
    items = dict(items or {})
    if apply_item is not None:
        if request.item_id is None:
            raise Invalid("this request is about no rubric item: name the items to change, or "
                          "queue a regrade")
        items[request.item_id] = apply_item
    moved = _change_items(session, request, items, actor, role) if items else []
    if regrade:
        sub = session.get(Submission, request.submission_id)
        if sub is None:
            raise NotFound("the submission the request is about was deleted")
        submissions.regrade(session=session, actor=actor, submission=sub, role=role)
        request.requeued = True
    request.changed = bool(moved)
    request.status, request.answer, request.answered_by = "answered", text, actor.id
    request.answered_at = now()
    session.flush()
    _log(session, actor, "regrade.answer", request, moved)
    _tell(session, request)


def _tell(session: Session, request: RegradeRequest) -> None:
    """The student who asked (and their team, who share the grade) read the answer."""
    a = session.get(Assignment, request.assignment_id)
    assert a is not None
    what = ("; the grade changed" if request.changed else "") + (
        "; the submission is graded again" if request.requeued else "")
    for uid in sorted({request.user_id, *teams.sharers_of(session=session,
                                                           submission_id=request.submission_id)}):
        notify.notify(session=session, user_id=uid, kind="regrade_answered",
                      key=f"regrade:{request.id}", link=f"/c/{a.course.slug}/{a.slug}/regrade",
                      title=f"{a.title}: your regrade request about {subject(request)} was "
                            f"answered{what}", body=request.answer or "")


def _change_items(session: Session, request: RegradeRequest, items: dict[int, bool], actor: User,
                  role: str | None) -> list[dict[str, object]]:
    """Apply or take off each item on the hand grade of the request's submission; what moved."""
    grade = _hand_grade(session, request)
    if grade is None:
        raise Invalid("this submission has no hand grade to change: grade it by hand first, or "
                      "queue a regrade")
    on = {i.id for i in manual.applied(session=session, grade=grade)}
    moved: list[dict[str, object]] = []
    for item_id, apply in sorted(items.items()):
        item = session.get(RubricItem, item_id)
        if item is None or item.assignment_id != request.assignment_id:
            raise NotFound(f"no rubric item {item_id} in this assignment")
        if (item_id in on) != apply and (points := manual.amend(
                session=session, grade=grade, item=item, grader=actor, role=role,
                applied=apply)) is not None:
            moved.append({"item": item_id, "applied": apply, "points_before": points[0],
                          "points_after": points[1]})
    return moved
