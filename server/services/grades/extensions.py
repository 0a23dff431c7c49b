"""Deadline extensions: a student's own deadline for one assignment, or a team's.

Granting or revoking one re-reads which of the student's (the team's) submissions were late
(the late policy applies to those after their own deadline only) and re-scores them, in the
same transaction. On team work a submission's deadline is its team's (the team's extension,
else the assignment's); a member's personal extension holds only for what they hand in alone.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from runners.protocol import GradeReport
from server.models import (
    Assignment,
    AuditLog,
    Extension,
    GradeReportRow,
    Submission,
    Team,
    User,
    aware,
)
from server.services.grades import grade_changes, grading
from server.services.people import courses, teams
from server.services.records.errors import Forbidden, Invalid, NotFound

DAY_S = 86400


def extended(*, session: Session, assignment: Assignment, user_id: int) -> datetime | None:
    """The deadline an extension gives this student, where later than the assignment's (an
    extension never shortens a deadline the instructor moved later afterwards). On team work,
    a member of a team has the team's extension: a personal one holds only for what the
    student hands in alone."""
    if assignment.deadline is None:
        return None
    team = teams.team_of(session=session, user_id=user_id, assignment_id=assignment.id) \
        if teams.team_work(assignment) else None
    return _team_extension(assignment, team) if team is not None else _personal(
        session, assignment, user_id)


def _personal(session: Session, assignment: Assignment, user_id: int) -> datetime | None:
    own = session.scalar(select(Extension.deadline).where(
        Extension.assignment_id == assignment.id, Extension.user_id == user_id))
    return _later(assignment, own)


def _team_extension(assignment: Assignment, team: Team) -> datetime | None:
    return _later(assignment, team.deadline)


def _later(assignment: Assignment, own: datetime | None) -> datetime | None:
    if assignment.deadline is None or own is None:
        return None
    return aware(own) if aware(own) > aware(assignment.deadline) else None


def deadline_of(*, session: Session, submission: Submission) -> datetime | None:
    """The deadline a submission was judged against: its team's (the team's extension, else the
    assignment's), else its uploader's."""
    a = submission.assignment
    if a.deadline is None:
        return None
    team = session.get(Team, submission.team_id) if submission.team_id is not None else None
    own = _team_extension(a, team) if team is not None else _personal(
        session, a, submission.user_id)
    return own or aware(a.deadline)


def passed(deadline: datetime | None, at: datetime) -> bool:
    """Whether `at` is past `deadline`: the one boundary every deadline rule uses. A submission
    made at the deadline's very instant is on time, so hidden tests shown "after the deadline"
    and the final run wait for the instant after."""
    return deadline is not None and aware(at) > aware(deadline)


def days_late(deadline: datetime | None, at: datetime) -> int:
    """Whole days `at` lies past `deadline` (0: on time), as late days count them."""
    if deadline is None or not passed(deadline, at):
        return 0
    return math.ceil((aware(at) - aware(deadline)).total_seconds() / DAY_S)


def deadline_for(*, session: Session, assignment: Assignment, user_id: int) -> datetime | None:
    """The deadline that holds for this student: their extension's, else the assignment's."""
    if assignment.deadline is None:
        return None
    own = extended(session=session, assignment=assignment, user_id=user_id)
    return own or aware(assignment.deadline)


def of_assignment(*, session: Session, assignment: Assignment) -> list[Extension]:
    return list(session.scalars(select(Extension).where(Extension.assignment_id == assignment.id)
                                .join(User, User.id == Extension.user_id).order_by(User.email)))


def _checked(assignment: Assignment, deadline: datetime) -> datetime:
    """An extension's deadline in UTC, after the assignment's (else a clear refusal)."""
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
    return deadline


def grant(*, session: Session, actor: User, assignment: Assignment, role: str | None,
          email: str, deadline: datetime, reason: str = "") -> Extension:
    """Give one student their own deadline (replacing an earlier extension); audit-logged."""
    if role != "instructor":
        raise Forbidden("only the course's instructors grant extensions")
    deadline = _checked(assignment, deadline)
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
    """Which of the student's own submissions (those they handed in alone) were late under
    their deadline now, and the scores that follow."""
    _restate(session, assignment, (Submission.user_id == user_id) & Submission.team_id.is_(None))


def _restate(session: Session, assignment: Assignment, which: Any) -> None:
    """Which of these submissions were late under their deadline now, and the scores that
    follow (graded ones are re-scored; nothing is run again)."""
    rows = session.execute(select(Submission, GradeReportRow).outerjoin(
        GradeReportRow, GradeReportRow.submission_id == Submission.id).where(
        Submission.assignment_id == assignment.id, which)).all()
    changed = []
    for sub, row in rows:
        deadline = deadline_of(session=session, submission=sub)
        if sub.late_days:  # covered by late days: fewer of them now (never more), never late
            sub.late_days = min(sub.late_days, days_late(deadline, sub.created_at))
            continue
        late = passed(deadline, sub.created_at)
        if late == sub.late:
            continue
        sub.late = late
        changed.append(sub)
        if row is not None:
            row.score = sub.score = grading.course_score(
                sub=sub, report=GradeReport.model_validate(row.report), review=row.review)
    session.flush()
    for sub in changed:
        grade_changes.of_submission(session=session, submission=sub)


def grant_team(*, session: Session, actor: User, assignment: Assignment, role: str | None,
               team_id: int, deadline: datetime | None, reason: str = "") -> Team:
    """Give a team its own deadline (None: take it back); every member's, for what the team
    hands in; its submissions' lateness restated; audit-logged."""
    if role != "instructor":
        raise Forbidden("only the course's instructors grant extensions")
    team = session.get(Team, team_id)
    if team is None or team.assignment_id != assignment.id:
        raise NotFound("no such team of this assignment")
    if deadline is not None:
        deadline = _checked(assignment, deadline)
    team.deadline, team.deadline_reason = deadline, reason if deadline is not None else ""
    session.flush()
    _restate(session, assignment, Submission.team_id == team.id)
    session.add(AuditLog(actor_id=actor.id, action="extension.team",
                         target=f"{assignment.course.slug}/{assignment.slug}/team/{team.id}",
                         detail={"team": team.name, "reason": reason,
                                 "deadline": deadline.isoformat() if deadline else None}))
    session.flush()
    return team
