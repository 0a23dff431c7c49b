"""Per-student deadline extensions: a student's own deadline for one assignment.

Granting or revoking one re-reads which of the student's submissions were late (the late policy
applies to those after their own deadline only) and re-scores them, in the same transaction.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from runners.protocol import GradeReport
from server.models import (
    Assignment,
    AuditLog,
    Extension,
    GradeReportRow,
    Submission,
    User,
    aware,
)
from server.services.grades import grade_changes, grading
from server.services.people import courses
from server.services.records.errors import Forbidden, Invalid, NotFound


def extended(*, session: Session, assignment: Assignment, user_id: int) -> datetime | None:
    """The student's own deadline when an extension gives one later than the assignment's
    (an extension never shortens a deadline the instructor moved later afterwards)."""
    if assignment.deadline is None:
        return None
    own = session.scalar(select(Extension.deadline).where(
        Extension.assignment_id == assignment.id, Extension.user_id == user_id))
    return aware(own) if own is not None and aware(own) > aware(assignment.deadline) else None


def passed(deadline: datetime | None, at: datetime) -> bool:
    """Whether `at` is past `deadline`: the one boundary every deadline rule uses. A submission
    made at the deadline's very instant is on time, so hidden tests shown "after the deadline"
    and the final run wait for the instant after."""
    return deadline is not None and aware(at) > aware(deadline)


def deadline_for(*, session: Session, assignment: Assignment, user_id: int) -> datetime | None:
    """The deadline that holds for this student: their extension's, else the assignment's."""
    if assignment.deadline is None:
        return None
    own = extended(session=session, assignment=assignment, user_id=user_id)
    return own or aware(assignment.deadline)


def of_assignment(*, session: Session, assignment: Assignment) -> list[Extension]:
    return list(session.scalars(select(Extension).where(Extension.assignment_id == assignment.id)
                                .join(User, User.id == Extension.user_id).order_by(User.email)))


def grant(*, session: Session, actor: User, assignment: Assignment, role: str | None,
          email: str, deadline: datetime, reason: str = "") -> Extension:
    """Give one student their own deadline (replacing an earlier extension); audit-logged."""
    if role != "instructor":
        raise Forbidden("only the course's instructors grant extensions")
    if deadline.tzinfo is None:
        raise Invalid("deadline needs a time zone (e.g. 2026-12-03T23:59:00+01:00)")
    try:
        deadline = deadline.astimezone(UTC)
    except OverflowError as exc:
        raise Invalid("deadline is out of range (years 1 to 9999 in UTC)") from exc
    if assignment.deadline is None:
        raise Invalid(f"{assignment.slug} has no deadline to extend")
    if deadline <= aware(assignment.deadline):
        raise Invalid(f"an extension must end after the assignment's deadline "
                      f"({aware(assignment.deadline).isoformat()})")
    student = courses.student(session=session, course=assignment.course, email=email)
    ext = session.scalar(select(Extension).where(Extension.assignment_id == assignment.id,
                                                 Extension.user_id == student.id))
    if ext is None:
        ext = Extension(assignment_id=assignment.id, user_id=student.id, deadline=deadline)
        session.add(ext)
    ext.deadline, ext.reason, ext.granted_by = deadline, reason, actor.id
    session.flush()
    _restate_lateness(session, assignment, student.id)
    session.add(AuditLog(actor_id=actor.id, action="extension.grant",
                         target=f"{assignment.course.slug}/{assignment.slug}/{student.email}",
                         detail={"deadline": deadline.isoformat(), "reason": reason}))
    session.flush()
    return ext


def revoke(*, session: Session, actor: User, assignment: Assignment, role: str | None,
           email: str) -> None:
    """Take a student's extension back: the assignment's deadline holds for them again."""
    if role != "instructor":
        raise Forbidden("only the course's instructors revoke extensions")
    student = courses.student(session=session, course=assignment.course, email=email)
    ext = session.scalar(select(Extension).where(Extension.assignment_id == assignment.id,
                                                 Extension.user_id == student.id))
    if ext is None:
        raise NotFound(f"{student.email} has no extension on {assignment.slug}")
    session.delete(ext)
    session.flush()
    _restate_lateness(session, assignment, student.id)
    session.add(AuditLog(actor_id=actor.id, action="extension.revoke",
                         target=f"{assignment.course.slug}/{assignment.slug}/{student.email}"))
    session.flush()


def _restate_lateness(session: Session, assignment: Assignment, user_id: int) -> None:
    """Which of the student's submissions were late under their deadline now, and the scores
    that follow (graded ones are re-scored; nothing is run again)."""
    deadline = deadline_for(session=session, assignment=assignment, user_id=user_id)
    changed = False
    rows = session.execute(select(Submission, GradeReportRow).outerjoin(
        GradeReportRow, GradeReportRow.submission_id == Submission.id).where(
        Submission.assignment_id == assignment.id, Submission.user_id == user_id)).all()
    for sub, row in rows:
        late = passed(deadline, sub.created_at)
        if late == sub.late:
            continue
        sub.late, changed = late, True
        if row is not None:
            row.score = sub.score = grading.course_score(
                sub=sub, report=GradeReport.model_validate(row.report), review=row.review)
    if changed:
        session.flush()
        grade_changes.of_student(session=session, assignment_id=assignment.id, user_id=user_id)
