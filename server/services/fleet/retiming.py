"""Gradings timed again, later, by the platform itself: a speedup measured while the node was
short of cores (the runner re-timed its windows for as long as it may, and the node never came
back) is not the submission's speedup, and the student did nothing to earn a second try or a
lower grade.

Such a grading is queued again once, RETIME_AFTER_S after it finished (a neighbour that took the
node's cores has usually gone by then), on the assignment's lowest priority so that no student's
first grading waits for it. Its report replaces the marked one, higher or lower: keeping the
better of two would reward noise, and the platform, not the student, chose to time it again.
MAX_AUTO_RETIMES bounds it: a node that is always short gets its mark on the leaderboard, not a
loop. Until the new report lands the marked one stands, as with any regrade.

A runner that waits for a free node (its default, `busy_node = wait`) gives such a grading no
performance points at all: its tests count, its performance is *pending*. That one is timed
again up to MAX_PENDING_RETIMES times, each RETIME_AFTER_S after the last, by whichever runner
of its queue takes it first; a neighbour that keeps a node busy for an hour does not cost the
student their performance points, and one that never leaves leaves them pending for the final
run (which times every student again) or an instructor's regrade, never at 0.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from server.models import GradeReportRow, Job, Submission, aware, now
from server.services.records import jobs as job_service

MAX_AUTO_RETIMES = 1
"""Times the platform grades one submission again on its own; after that the mark stays."""
MAX_PENDING_RETIMES = 6
"""Times the platform times again, by itself, a grading whose performance points are pending."""
RETIME_PRIORITY = 9
"""The lowest priority, as for regrading a whole assignment: fresh submissions go first."""


def due(*, session: Session, after_s: float) -> list[Submission]:
    """Graded submissions whose stored speedup was measured under interference, finished at
    least `after_s` ago, not yet timed again as often as the platform may, nothing pending."""
    pending = select(Job.submission_id).where(Job.state.in_(("queued", "claimed")),
                                              Job.submission_id.is_not(None))
    return list(session.scalars(
        select(Submission).join(GradeReportRow, GradeReportRow.submission_id == Submission.id)
        .where(GradeReportRow.timing_interfered, Submission.status == "graded",
               (Submission.auto_retimes < MAX_AUTO_RETIMES)
               | ((GradeReportRow.credit_status == "pending")
                  & (Submission.auto_retimes < MAX_PENDING_RETIMES)),
               Submission.finished_at <= now() - timedelta(seconds=after_s),
               Submission.id.not_in(pending))
        .order_by(Submission.finished_at)))


def retime_due(*, session: Session, after_s: float) -> int:
    """Queue every due submission again (the caller commits); how many were queued."""
    subs = due(session=session, after_s=after_s)
    for sub in subs:
        sub.auto_retimes += 1
        job_service.requeue(session=session, submission=sub, priority=RETIME_PRIORITY)
    return len(subs)


def allowed(row: GradeReportRow) -> int:
    """How often the platform times this grading again by itself."""
    return MAX_PENDING_RETIMES if row.credit_status == "pending" else MAX_AUTO_RETIMES


def promise(*, sub: Submission, row: GradeReportRow | None, after_s: float) -> str | None:
    """What the report page tells its reader of a re-timing to come (None: none will)."""
    if row is None or not row.timing_interfered or sub.status != "graded":
        return None
    pending = row.credit_status == "pending"
    if not after_s or sub.auto_retimes >= allowed(row):
        if not pending:
            return None
        return (f"The node stayed busy in every timing ({sub.auto_retimes + 1}): your performance "
                "points stay pending, never 0, until the assignment's final run (or your "
                "instructor's regrade) times it on a free node.")
    minutes = max(1, round(after_s / 60))
    when = "shortly"
    if sub.finished_at is not None:
        at = aware(sub.finished_at) + timedelta(seconds=after_s)
        when = f"at about {at:%H:%M} UTC" if at > now() else "shortly"
    if pending:
        return (f"The platform times it again by itself {when}, about {minutes} min after this "
                "grading, on whichever runner is free; your test points count now, and that "
                "timing's report replaces this one.")
    return (f"The node was busy while you were timed: the platform will time it again by "
            f"itself {when}, about {minutes} min after it was graded; that grading's report "
            "replaces this one.")
