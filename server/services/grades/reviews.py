"""Instructor review of speedups the credit policy held or refused (scoring.credit)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from runners.protocol import GradeReport
from server.models import Assignment, AuditLog, Enrollment, GradeReportRow, Submission, User
from server.services.grades import grade_changes, grading
from server.services.records.errors import Conflict, Forbidden

REVIEWABLE = ("held", "refused")
LEGACY = ("graded before the credit policy existed, with a speedup above what its cores can "
          "give; regrade it to measure its parallelism")
Decision = Literal["grant", "refuse"]


@dataclass(frozen=True)
class Item:
    submission: Submission
    row: GradeReportRow
    alias: str
    reason: str


def of_assignment(*, session: Session, assignment: Assignment) -> list[Item]:
    """Every graded submission whose speedup was held or refused, undecided ones first."""
    rows = session.execute(
        select(Submission, GradeReportRow, Enrollment.alias)
        .join(GradeReportRow, GradeReportRow.submission_id == Submission.id)
        .outerjoin(Enrollment, (Enrollment.user_id == Submission.user_id)
                   & (Enrollment.course_id == assignment.course_id))
        .where(Submission.assignment_id == assignment.id,
               GradeReportRow.credit_status.in_(REVIEWABLE))
        .order_by(GradeReportRow.review.is_not(None), Submission.id.desc())).all()
    return [_item(sub, row, alias) for sub, row, alias in rows]


def _item(sub: Submission, row: GradeReportRow, alias: str | None) -> Item:
    credit = GradeReport.model_validate(row.report).credit
    return Item(submission=sub, row=row, alias=alias or f"student-{sub.user_id}",
                reason=credit.reason if credit else LEGACY)


def decide(*, session: Session, actor: User, submission: Submission, role: str | None,
           decision: Decision) -> Item:
    """Grant the measured speedup its performance points, or leave them refused; audit-logged."""
    if role != "instructor":
        raise Forbidden("only the course's instructors review speedups")
    row = grading.report_of(session=session, submission_id=submission.id)
    if row is None or row.credit_status not in REVIEWABLE:
        raise Conflict("this submission has no held or refused speedup to review")
    report = GradeReport.model_validate(row.report)
    row.review = "granted" if decision == "grant" else "refused"
    row.credited_speedup = grading.ranked_speedup(
        submission, row.speedup_median if decision == "grant" else None, row.review)
    row.score = submission.score = grading.course_score(sub=submission, report=report,
                                                        review=row.review)
    session.add(AuditLog(actor_id=actor.id, action=f"speedup.{decision}", target=str(submission.id),
                         detail={"speedup": row.speedup_median, "credit": row.credit_status,
                                 "score": row.score, "at": datetime.now(UTC).isoformat()}))
    session.flush()
    grade_changes.of_submission(session=session, submission=submission)
    alias = session.scalar(select(Enrollment.alias).where(
        Enrollment.user_id == submission.user_id,
        Enrollment.course_id == submission.assignment.course_id))
    return _item(submission, row, alias)
