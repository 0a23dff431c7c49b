"""Leaderboard: each student's best fully-correct submission, ranked by speedup; CI overlap = tie."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlalchemy import case, func, or_, select
from sqlalchemy.orm import Session

from server.models import Assignment, Enrollment, GradeReportRow, Submission

MARKS = {"held": "held for review", "refused": "speedup not credited"}


@dataclass(frozen=True)
class Entry:
    rank: int | None  # None: unranked (a held or refused speedup), listed below the ranked
    tied: bool
    user_id: int
    alias: str
    submission_id: int
    speedup: float | None  # the credited speedup (ranked), the measured one (unranked)
    ci_low: float | None
    ci_high: float | None
    score: float
    mark: str | None = None  # why it is unranked


def entries(*, session: Session, assignment: Assignment) -> list[Entry]:
    """Ranked entries; an entry whose CI overlaps the one above shares its rank.

    Each student's best passed submission (a ranked one first, then the highest credited
    speedup, then score, then the earliest) is picked in the database with a window function,
    so only one row per student comes back, however many graded submissions the assignment
    holds. A speedup the credit policy held or refused (and no instructor granted) is never
    ranked: its student is listed below the ranked ones, with a mark.
    """
    r = GradeReportRow
    unranked = case((r.credit_status.in_(tuple(MARKS)) & or_(r.review.is_(None), r.review != "granted"), 1),
                    else_=0)
    speedup = func.coalesce(r.credited_speedup, -1.0)
    ranked = (
        select(Submission.user_id, Submission.id.label("submission_id"), r.score,
               speedup.label("speed"), r.speedup_median, r.speedup_ci_low, r.speedup_ci_high,
               r.credit_status, unranked.label("unranked"), Enrollment.alias,
               func.row_number().over(partition_by=Submission.user_id,
                                      order_by=(unranked, speedup.desc(), r.score.desc(),
                                                Submission.id)).label("nth"))
        .join(r, r.submission_id == Submission.id)
        .join(Enrollment, (Enrollment.user_id == Submission.user_id)
              & (Enrollment.course_id == assignment.course_id))
        .where(Submission.assignment_id == assignment.id, r.verdict == "passed",
               Enrollment.role == "student")
        .subquery())
    rows = session.execute(
        select(ranked.c.user_id, ranked.c.submission_id, ranked.c.score, ranked.c.speed,
               ranked.c.speedup_median, ranked.c.speedup_ci_low, ranked.c.speedup_ci_high,
               ranked.c.credit_status, ranked.c.unranked, ranked.c.alias)
        .where(ranked.c.nth == 1)).all()
    ordered = sorted(rows, key=lambda x: (x.unranked, -float(x.speed), -x.score, x.submission_id))
    out: list[Entry] = []
    for i, row in enumerate(ordered):
        alias = row.alias or f"student-{row.user_id}"
        if row.unranked:
            out.append(Entry(rank=None, tied=False, user_id=row.user_id, alias=alias,
                             submission_id=row.submission_id, speedup=row.speedup_median,
                             ci_low=row.speedup_ci_low, ci_high=row.speedup_ci_high,
                             score=row.score, mark=MARKS[row.credit_status]))
            continue
        speed = float(row.speed) if row.speed >= 0 else None
        lo, hi = row.speedup_ci_low, row.speedup_ci_high
        if speed is not None and lo is not None and hi is not None \
                and row.speedup_median is not None and speed < row.speedup_median:
            lo, hi = min(lo, speed), min(hi, speed)  # capped: no more than the credited figure
        tied, rank = False, i + 1
        prev = out[-1] if out else None
        if prev is not None and prev.rank is not None and speed is not None \
                and prev.speedup is not None and lo is not None and prev.ci_low is not None \
                and hi is not None and hi >= prev.ci_low:
            tied, rank = True, prev.rank
            if not prev.tied:
                out[-1] = replace(prev, tied=True)
        out.append(Entry(rank=rank, tied=tied, user_id=row.user_id, alias=alias,
                         submission_id=row.submission_id, speedup=speed, ci_low=lo, ci_high=hi,
                         score=row.score))
    return out
