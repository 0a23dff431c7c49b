"""A report becomes a grade: its score under the assignment's own scoring curve and late policy,
stored with its tests and scaling points; a changed curve rescores what is stored."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from runners.protocol import (
    GradeReport,
    Manifest,
    Verdict,
    credited_speedup,
    measured_under_interference,
    most_cores_give,
)
from runners.protocol import points as grade_points
from server.models import Assignment, GradeReportRow, ScalingPointRow, Submission, TestResultRow, now
from server.services.grades import grade_changes, reference


def storable(value: str) -> str:
    """Text a database column can hold: PostgreSQL refuses NUL (program output can carry one)."""
    return value.replace("\x00", "\ufffd")


def status_of(verdict: Verdict) -> str:
    """The status a stored verdict gives its submission: a fault of the platform's is an error
    (not the student's to answer for), any other verdict a grade."""
    return "error" if verdict.fault == "platform" else "graded"


def report_of(*, session: Session, submission_id: int) -> GradeReportRow | None:
    """The submission's stored report (one per submission), or None before its first grade."""
    return session.scalar(select(GradeReportRow).where(
        GradeReportRow.submission_id == submission_id))


def store_report(*, session: Session, sub: Submission, report: GradeReport) -> GradeReportRow:
    """One report per submission (a regrade replaces it), with its tests and scaling points.
    An instructor's review of a held or refused speedup carries over to a regrade that holds or
    refuses it again (the same code, judged already)."""
    old = report_of(session=session, submission_id=sub.id)
    review = None
    if old is not None:
        if report.credit is not None and report.credit.status in ("held", "refused"):
            review = old.review
        session.delete(old)
        session.flush()
    score = course_score(sub=sub, report=report, review=review)
    row = GradeReportRow(
        submission_id=sub.id, verdict=report.verdict.value, score=score,
        max_score=report.max_score,
        speedup_median=report.speedup.median if report.speedup else None,
        speedup_ci_low=report.speedup.ci_low if report.speedup else None,
        speedup_ci_high=report.speedup.ci_high if report.speedup else None,
        serial_fraction=report.serial_fraction, report=report.model_dump(mode="json"),
        credit_status=report.credit.status if report.credit else None, review=review,
        timing_interfered=measured_under_interference(report.speedup),
        credited_speedup=None if report.speedup is None else ranked_speedup(
            sub, credited_speedup(report.credit, report.speedup.median, review=review), review))
    session.add(row)
    reference.record(session=session, version_id=sub.version_id, user_id=sub.user_id,
                     report=report)
    session.flush()
    session.add_all([TestResultRow(report_id=row.id, name=storable(t.name)[:300],
                                   outcome=t.outcome.value, verdict=t.verdict.value,
                                   message=storable(t.message), hidden=t.hidden, weight=t.weight)
                     for t in report.tests])
    session.add_all([ScalingPointRow(report_id=row.id, workers=p.workers, speedup=p.speedup,
                                     efficiency=p.efficiency, ci_low=p.ci_low, ci_high=p.ci_high,
                                     karp_flatt=p.karp_flatt) for p in report.scaling])
    fault = report.verdict.fault
    sub.status = status_of(report.verdict)
    sub.verdict, sub.score, sub.finished_at = report.verdict.value, score, now()
    # Only what the student caused counts (a retried platform failure that then graded does).
    sub.counts_for_quota = fault == "student"
    session.flush()
    grade_changes.of_submission(session=session, submission=sub)
    return row


def ranked_speedup(sub: Submission, earned: float | None, review: str | None) -> float | None:
    """What the leaderboard ranks by: the credited speedup; a granted one no higher than the
    package's cores can give (a granted 60× NumPy-in-a-pool is not 30 times a perfect parallel
    sum)."""
    if earned is None or review != "granted":
        return earned
    res = Manifest.model_validate(sub.version.manifest).resources
    return earned if res.kind == "gpu" else min(earned, most_cores_give(res.cores))


def course_score(*, sub: Submission, report: GradeReport, review: str | None = None) -> float:
    """The report's score under the assignment's own scoring curve and late policy; `review`:
    an instructor granted ("granted") or refused ("refused") a held or refused speedup. With
    neither a curve of the course's nor a review, the runner's own score stands: the runner
    computed it with the same function (runners/protocol/points.py; tests/test_points.py)."""
    a = sub.assignment
    if report.speedup is not None and (a.speedup_min or a.speedup_full or review):
        return points(sub=sub, report=report,
                      earned=grade_points.earned_speedup(report, review=review))
    return late(sub, report.score)


def points(*, sub: Submission, report: GradeReport, earned: float | None) -> float:
    """The report's test points and the performance points `earned` (a credited speedup; None:
    none) earns under the assignment's curve, after its late policy."""
    a = sub.assignment
    scoring = Manifest.model_validate(sub.version.manifest).scoring
    return late(sub, grade_points.score(report, scoring, earned=earned,
                                        speedup_min=a.speedup_min, speedup_full=a.speedup_full))


def late_work_earns(a: Assignment) -> bool:
    """Whether a submission after the deadline can still earn points: late policy accept, or a
    penalty under 100 %."""
    return a.late_policy == "accept" or (a.late_policy == "penalty" and a.late_penalty < 1)


def late(sub: Submission, score: float) -> float:
    """`score` after the assignment's late policy."""
    return sub.assignment.after_late_policy(score, sub.late)


def rescore(*, session: Session, assignment: Assignment) -> int:
    """Apply a changed scoring curve to every stored grade of the assignment (no regrading:
    the measured speedups stay what they were)."""
    rows = session.execute(select(GradeReportRow, Submission).join(
        Submission, GradeReportRow.submission_id == Submission.id).where(
        Submission.assignment_id == assignment.id)).all()
    for row, sub in rows:
        score = course_score(sub=sub, report=GradeReport.model_validate(row.report),
                             review=row.review)
        row.score = sub.score = score
    session.flush()
    grade_changes.of_everyone(session=session, assignment_id=assignment.id)
    return len(rows)
