"""Grade news: which grade changes a student is told of, once each.

A submission's points (its final run's where one settled them, else its live grading's) are
compared with what its students were last told (`Submission.told_score`). The first time they
are known the grade "landed": told to each student who shares it when its grading took longer
than they chose to wait in the page (kinds.GRADE_WAIT_S by default; 0: always). Later, a move
away from what they were told is a "grade changed" notice, one per student and assignment while
it is unread (a regrade-all that grades each of 300 students' submissions again tells each of
them once). Hand-graded points are told by their release and by a regrade request's answer, not
here; a final run tells each student whose grade it settled, changed or not."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from server.models import Assignment, BoardEntry, FinalRun, GradeReportRow, Submission, aware
from server.services.notices import notify
from server.services.people import teams
from server.services.records import final_grades

MOVED = 0.005
"""Points closer than this are the same (stored figures are rounded to hundredths)."""


def _points(session: Session, sub: Submission) -> float | None:
    final = final_grades.settled(session=session, sub=sub)
    return final.score if final is not None else sub.score


def _max(session: Session, sub: Submission) -> float | None:
    return session.scalar(select(GradeReportRow.max_score).where(
        GradeReportRow.submission_id == sub.id))


def submission(*, session: Session, sub: Submission) -> None:
    """Tell what changed in `sub`'s points, if anything (grades/grade_changes.py calls it)."""
    points = _points(session, sub)
    if points is None:
        return
    a = session.get(Assignment, sub.assignment_id)
    assert a is not None
    of = _max(session, sub)
    shown = f"{points:g} of {of:g} points" if of is not None else f"{points:g} points"
    if sub.told_score is None:
        took = ((aware(sub.finished_at) - aware(sub.created_at)).total_seconds()
                if sub.finished_at is not None else 0.0)
        for uid in teams.sharers_of(session=session, submission_id=sub.id):
            wait = notify.grade_wait_s(session=session, user_id=uid)
            if wait == 0 or took > wait:
                notify.notify(session=session, user_id=uid, kind="graded",
                              key=f"graded:{sub.id}", link=f"/s/{sub.id}",
                              title=f"{a.title}: submission {sub.id} graded, {shown}",
                              body=f"Its grading took {took:.0f} s.")
    elif abs(points - sub.told_score) >= MOVED:
        for uid in teams.sharers_of(session=session, submission_id=sub.id):
            notify.notify(session=session, user_id=uid, kind="grade_changed",
                          key=f"grade:{a.id}", link=f"/s/{sub.id}",
                          title=f"{a.title}: your grade changed",
                          body=f"Submission {sub.id} now has {shown} "
                               f"(it had {sub.told_score:g}).")
    sub.told_score = points
    session.flush()


def assignment(*, session: Session, assignment_id: int) -> None:
    """Every submission of the assignment whose students were told its points."""
    for sub in session.scalars(select(Submission).where(
            Submission.assignment_id == assignment_id, Submission.told_score.is_not(None))
            .order_by(Submission.id)):
        submission(session=session, sub=sub)


def final_run(*, session: Session, run: FinalRun) -> None:
    """Tell each student whose grade the finished run settled (or kept live: a busy node)."""
    a = session.get(Assignment, run.assignment_id)
    assert a is not None
    for g in final_grades.grades(session=session, assignment_id=run.assignment_id).values():
        if g.run_id != run.id:
            continue
        busy = g.node_busy
        notify.notify(session=session, user_id=g.user_id, kind="final_run",
                      key=f"grade:{a.id}", link=f"/c/{a.course.slug}/{a.slug}",
                      title=f"{a.title}: the final run settled your grade at {g.score:g} points",
                      body=("The node stayed busy: your live points stand." if busy else
                            "Every student's counted submission was timed again on the same "
                            "node, interleaved; this is your grade."))
    for entry in session.scalars(select(BoardEntry).where(
            BoardEntry.assignment_id == run.assignment_id)):
        sub = session.get(Submission, entry.submission_id)
        if sub is not None:
            sub.told_score = _points(session, sub)
    session.flush()
