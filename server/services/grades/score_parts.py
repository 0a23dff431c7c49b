"""One submission's points as every page shows them: the settled figure once a final run settled
it (the live one beside it, labelled), split into tests, performance and hand-graded points, and
whether its performance points wait for a free node."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy.orm import Session

from server.models import Assignment, BoardEntry, GradeReportRow, Submission
from server.services.grades import grading
from server.services.records import final_grades, manual_points


@dataclass(frozen=True)
class Parts:
    total: float
    """The points that count: the final run's where it settled this submission, else live."""
    tests: float
    performance: float
    manual: float | None
    """Released hand-graded points of this submission (None: none released)."""
    live: float
    """The live grading's points (the same as `total` until a final run settles them)."""
    settled: bool
    """A final run settled these points (from clean turns, or kept live: `node_busy`)."""
    node_busy: bool
    pending: bool
    """The performance points wait for a timing on a free node (none counted yet)."""


def of(*, session: Session, sub: Submission, row: GradeReportRow | None) -> Parts | None:
    """The parts of `sub`'s points (None: not graded yet)."""
    if row is None or sub.score is None:
        return None
    final = final_grades.settled(session=session, sub=sub)
    total = final.score if final is not None else sub.score
    tests = grading.late(sub, float(row.report.get("test_points", 0.0)))
    by_hand = manual_points.released_points(session=session, assignment=sub.assignment,
                                            user_id=sub.user_id, submission_id=sub.id)
    return Parts(total=total, tests=min(tests, total), performance=round(max(total - tests, 0), 2),
                 manual=by_hand.get(sub.user_id), live=sub.score, settled=final is not None,
                 node_busy=final is not None and final.node_busy,
                 pending=row.credit_status == "pending" and (final is None or final.node_busy))


def of_many(*, session: Session, subs: list[Submission]) -> dict[int, Parts]:
    """`of` for each graded submission of a list, by submission id."""
    out = {}
    for sub in subs:
        parts = of(session=session, sub=sub,
                   row=grading.report_of(session=session, submission_id=sub.id))
        if parts is not None:
            out[sub.id] = parts
    return out


def counted(*, session: Session, assignment: Assignment, user_id: int) -> Parts | None:
    """The parts of the student's counted submission of `assignment` (the one its board shows;
    None: nothing passed yet): the points their course page shows beside it."""
    entry = session.get(BoardEntry, (assignment.id, user_id))
    if entry is None:
        return None
    sub = session.get(Submission, entry.submission_id)
    if sub is None:
        return None
    return of(session=session, sub=sub,
              row=grading.report_of(session=session, submission_id=sub.id))
