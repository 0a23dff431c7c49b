"""The final run: the class's performance points settled in one fair run after the deadline.

A live grading's speedup is measured in whatever hour the student submitted; a noisy stretch of
the host hits one student and spares the next. After the last deadline (extensions included)
each student's counted submission (the one their leaderboard entry shows) is timed again,
timing only (its hidden tests passed on this very version already; every timed answer is still
checked), in ROUNDS rounds. Each round takes every student once, in a random order of its own,
and the rounds follow one another in the queue, so a slow stretch of a runner falls on students
drawn at random, and each student's figure is the median of their rounds. A round spends
1/rounds of the package's timing budget, all of it on the top worker count (the headline figure;
no scaling curve): a student's rounds together time about what one ordinary grading times, each
round paying its own sandbox start and warm-up calls on top.

A turn whose node stayed busy (its report's interference: most windows short, whether the
runner then left the points pending or timed anyway) settles nothing: it is kept with what the
node delivered, and the student gets another turn in a later round, until the run's busy limit
(`busy_until`, the operator's `final_busy_wait_s` after the start). A student still short of
ROUNDS clean turns then keeps the live points, marked "final run: node busy", and the run's page
and its audit entry say who.

The final points are the live report's test points and the performance points the median
earned (the credit policy of each round's own measurement, an instructor's review of the live
speedup kept). Until a final run is done the live figure is provisional; the latest finished run
is what boards, exports and LMS gradebooks carry. The run lives in the database (turns and their
jobs), so it survives a restart of the server or a runner: a job whose runner went silent is
queued again like any other.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from runners.protocol import (
    GradeReport,
    Interference,
    Manifest,
    credited_speedup,
    node_was_busy,
    timed_on_a_busy_node,
)
from server import db
from server.models import (
    Assignment,
    AuditLog,
    BoardEntry,
    Enrollment,
    Extension,
    FinalGrade,
    FinalRun,
    FinalTurn,
    GradeReportRow,
    Job,
    Submission,
    User,
    aware,
    now,
)
from server.services import MAX_ROW_ID
from server.services.grades import extensions, grade_changes, grading, reference
from server.services.notices import follow
from server.services.people import courses
from server.services.records import jobs
from server.services.records.errors import Conflict, Forbidden, Invalid, NotFound

ROUNDS = 3
"""Rounds of a final run: each student's figure is the median of this many timings."""
MAX_ROUNDS = 9
FINAL_PRIORITY = 8
"""After students' fresh submissions (a late one is still graded first), before a regrade-all."""
AUTO_WINDOW = timedelta(days=7)
"""The platform starts a final run by itself only for a last deadline this recent: an upgrade
does not re-time every assignment that closed before final runs existed."""


def counted(*, session: Session, assignment: Assignment) -> list[Submission]:
    """Each enrolled student's counted submission (their board entry's) with a measured
    speedup, once each (a team's members count one submission)."""
    boards = (select(BoardEntry.submission_id)
              .join(Enrollment, (Enrollment.user_id == BoardEntry.user_id)
                    & (Enrollment.course_id == assignment.course_id))
              .where(BoardEntry.assignment_id == assignment.id, Enrollment.role == "student"))
    return list(session.scalars(
        select(Submission).join(GradeReportRow, GradeReportRow.submission_id == Submission.id)
        .where(Submission.id.in_(boards), GradeReportRow.speedup_median.is_not(None))
        .order_by(Submission.id)))


def last_deadline(*, session: Session, assignment: Assignment) -> datetime | None:
    """The latest deadline of any student (extensions included); None: no deadline."""
    if assignment.deadline is None:
        return None
    extended = session.scalar(select(func.max(Extension.deadline))
                              .where(Extension.assignment_id == assignment.id))
    return max(aware(assignment.deadline), aware(extended)) if extended else aware(
        assignment.deadline)


def under_way(*, session: Session, assignment: Assignment) -> FinalRun | None:
    return session.scalar(select(FinalRun).where(FinalRun.assignment_id == assignment.id,
                                                 FinalRun.status == "running"))


def start(*, session: Session, assignment: Assignment, actor: User | None, role: str | None,
          rounds: int = ROUNDS, busy_wait_s: int = 0) -> FinalRun:
    """Queue a final run of every student's counted submission (audit-logged); `actor` None:
    the platform's own, once the last deadline passed."""
    if actor is not None and not courses.is_staff(role):
        raise Forbidden("only the course's instructors and TAs start a final run")
    if not 1 <= rounds <= MAX_ROUNDS:
        raise Invalid(f"rounds must be between 1 and {MAX_ROUNDS}")
    db.hold(session, Assignment, assignment.id)  # two starts at once: the second sees the first
    if (running := under_way(session=session, assignment=assignment)) is not None:
        raise Conflict(f"final run {running.id} of {assignment.slug} is under way; it can be "
                       "cancelled or waited for")
    subs = counted(session=session, assignment=assignment)
    if not subs:
        raise Invalid(f"no student of {assignment.slug} has a passed submission with a measured "
                      "speedup: a final run has nothing to time")
    run = FinalRun(assignment_id=assignment.id, started_by=actor.id if actor else None,
                   automatic=actor is None, rounds=rounds,
                   busy_until=now() + timedelta(seconds=busy_wait_s))
    try:
        with session.begin_nested():
            session.add(run)
    except IntegrityError as exc:  # another start won the race (the index allows one running)
        raise Conflict(f"a final run of {assignment.slug} is under way; it can be cancelled "
                       "or waited for") from exc
    order = random.SystemRandom()
    versions = {sub.version_id: sub.version for sub in subs}
    fixed = {vid: reference.speedup(session=session, version=v)  # the pooled figure now,
             for vid, v in versions.items()}                    # one for the whole run
    for r in range(rounds):
        for sub in order.sample(subs, len(subs)):
            _queue_turn(session, run, sub, r, fixed[sub.version_id])
    session.add(AuditLog(actor_id=actor.id if actor else None, action="final.start",
                         target=f"{assignment.course.slug}/{assignment.slug}",
                         detail={"run": run.id, "rounds": rounds, "students": len(subs)}))
    session.flush()
    return run


def _queue_turn(session: Session, run: FinalRun, sub: Submission, round_: int,
                reference_speedup: float | None) -> FinalTurn:
    turn = FinalTurn(run_id=run.id, user_id=sub.user_id, submission_id=sub.id, round=round_,
                     reference_speedup=reference_speedup)
    session.add(turn)
    session.flush()
    res = Manifest.model_validate(sub.version.manifest).resources
    job = Job(kind="final", turn_id=turn.id, queue=res.queue, priority=FINAL_PRIORITY,
              time_limit_s=jobs.time_limit_s(res), published_at=now())
    session.add(job)
    session.flush()
    jobs.publish(session, job, stamp=False)
    return turn


def cancel(*, session: Session, run: FinalRun, actor: User, role: str | None) -> None:
    """Stop a running final run: its queued and claimed jobs end; no final grade comes of it."""
    if not courses.is_staff(role):
        raise Forbidden("only the course's instructors and TAs cancel a final run")
    if run.status != "running":
        raise Conflict(f"final run {run.id} is {run.status}")
    turns = select(FinalTurn.id).where(FinalTurn.run_id == run.id)
    for job in session.scalars(select(Job).where(Job.turn_id.in_(turns),
                                                 Job.state.in_(("queued", "claimed")))):
        job.state, job.token_hash = "cancelled", None
    run.status, run.finished_at = "cancelled", now()
    session.add(AuditLog(actor_id=actor.id, action="final.cancel",
                         target=f"{run.assignment.course.slug}/{run.assignment.slug}",
                         detail={"run": run.id}))
    session.flush()


def claimed(*, session: Session, job: Job, runner: str
            ) -> tuple[Submission, float, float | None]:
    """A runner took a final turn's job: the submission to time, the share of the budget and
    the reference's speedup fixed at the run's start."""
    turn = session.get(FinalTurn, job.turn_id)
    assert turn is not None
    turn.status, turn.runner = "running", runner
    run = session.get(FinalRun, turn.run_id)
    assert run is not None
    return turn.submission, 1 / run.rounds, turn.reference_speedup


def turn_ended(*, session: Session, job: Job, report: GradeReport | None,
               error: str | None) -> None:
    """A turn's outcome: its figure (`report`), or a failure on the platform's side after the
    last attempt (`error`); the run settles once no turn is left."""
    turn = session.get(FinalTurn, job.turn_id)
    assert turn is not None
    turn.finished_at = now()
    if report is None:
        turn.status, turn.error = "failed", grading.storable(error or "no report")[:2000]
    elif report.verdict.value == "passed" and report.speedup is None:
        # Nothing measured, and not the code's doing (a simulated GPU, timing off on that
        # runner): the round is left out, as a platform failure is.
        turn.status, turn.error = "failed", grading.storable(report.summary)[:2000]
    elif report.verdict.value == "passed" and timed_on_a_busy_node(report.speedup):
        assert report.speedup is not None and report.speedup.interference is not None
        turn.status, turn.timed_s = "busy", report.wall_time_s
        turn.node = report.speedup.interference.model_dump(mode="json")
        turn.measured = report.speedup.median
        run = session.get(FinalRun, turn.run_id)
        assert run is not None
        if run.status == "running" and run.busy_until is not None \
                and aware(run.busy_until) > now():
            last = session.scalar(select(func.max(FinalTurn.round))
                                  .where(FinalTurn.run_id == run.id)) or 0
            _queue_turn(session, run, turn.submission, max(last, run.rounds - 1) + 1,
                        turn.reference_speedup)
    else:
        turn.status, turn.timed_s = "done", report.wall_time_s
        if report.speedup is not None and report.speedup.interference is not None:
            turn.node = report.speedup.interference.model_dump(mode="json")
        reference.record(session=session, version_id=turn.submission.version_id,
                         user_id=turn.user_id, report=report, final=True)
        if report.verdict.value != "passed":
            # Its own code failed a timed call (a wrong answer, a crash): no performance points
            # for this round, whatever it earned live.
            turn.error = grading.storable(report.summary)[:2000]
        else:
            assert report.speedup is not None
            live = session.scalar(select(GradeReportRow.review).where(
                GradeReportRow.submission_id == turn.submission_id))
            turn.measured = report.speedup.median
            turn.earned = credited_speedup(report.credit, report.speedup.median, review=live)
            turn.ci_low, turn.ci_high = report.speedup.ci_low, report.speedup.ci_high
    session.flush()
    run = session.get(FinalRun, turn.run_id)
    assert run is not None
    settle(session=session, run=run)


def requeued(*, session: Session, job: Job) -> None:
    """A turn's job went back to the queue (its runner failed or left)."""
    turn = session.get(FinalTurn, job.turn_id)
    if turn is not None:
        turn.status, turn.runner = "queued", None


def settle(*, session: Session, run: FinalRun) -> bool:
    """Once every turn is done or failed: each student's final grade, the run done, and what
    follows a changed grade (boards, LMS gradebooks). False while turns are left."""
    if run.status != "running":
        return False
    turns = list(session.scalars(select(FinalTurn).where(FinalTurn.run_id == run.id)))
    if any(t.status in ("queued", "running") for t in turns):
        return False
    by_sub: dict[int, list[FinalTurn]] = {}
    for t in turns:
        by_sub.setdefault(t.submission_id, []).append(t)
    # Each student whose board submission was timed gets its grade: a team's members, one each.
    holders: dict[int, list[int]] = {}
    for uid, sid in session.execute(select(BoardEntry.user_id, BoardEntry.submission_id).where(
            BoardEntry.assignment_id == run.assignment_id, BoardEntry.submission_id.in_(by_sub))):
        holders.setdefault(sid, []).append(uid)
    short_of_clean: list[int] = []
    for sid, mine in by_sub.items():
        for user_id in sorted(holders.get(sid) or {t.user_id for t in mine}):
            _settle_one(session, run, user_id, mine, short_of_clean)
    run.status, run.finished_at = "done", now()
    if short_of_clean:  # the instructor is told: the audit log and the run's page say who
        session.add(AuditLog(actor_id=None, action="final.node_busy",
                             target=f"{run.assignment.course.slug}/{run.assignment.slug}",
                             detail={"run": run.id, "students": len(short_of_clean),
                                     "user_ids": short_of_clean}))
    session.flush()
    grade_changes.of_everyone(session=session, assignment_id=run.assignment_id)
    follow.final_run(session=session, run=run)
    return True


def _settle_one(session: Session, run: FinalRun, user_id: int, mine: list[FinalTurn],
                short_of_clean: list[int]) -> None:
    """One student's final grade from their counted submission's turns (`mine`)."""
    timed = [t for t in mine if t.status == "done"]
    if len(timed) < run.rounds and any(t.status in ("busy", "expired") for t in mine):
        # The node stayed busy until the limit: no figure from busy turns, nor from a few
        # clean ones the others' rounds outnumber; the live points stand, marked.
        sub = mine[0].submission
        row = grading.report_of(session=session, submission_id=sub.id)
        if row is not None:
            short_of_clean.append(user_id)
            session.add(FinalGrade(run_id=run.id, user_id=user_id,
                                   assignment_id=run.assignment_id, submission_id=sub.id,
                                   speedup=row.credited_speedup, range_low=row.speedup_ci_low,
                                   range_high=row.speedup_ci_high, score=row.score,
                                   turns=len(timed), node_busy=True))
        return
    if not timed:  # every round failed on the platform's side: the live grade stands
        return
    sub = timed[0].submission
    row = grading.report_of(session=session, submission_id=sub.id)
    if row is None:  # the submission was regraded into nothing meanwhile
        return
    earned = [t.earned or 0.0 for t in timed]
    speedup = statistics.median(earned) if any(t.earned is not None for t in timed) else None
    score = grading.points(sub=sub, report=GradeReport.model_validate(row.report),
                           earned=speedup)
    session.add(FinalGrade(run_id=run.id, user_id=user_id, assignment_id=run.assignment_id,
                           submission_id=sub.id, speedup=speedup, range_low=min(earned),
                           range_high=max(earned), score=score, turns=len(timed)))


def expire_due(*, session: Session) -> int:
    """Runs past their busy limit: the turns still queued (timed again because the node was
    busy) end as expired, and each run settles once its running turns are in (the caller
    commits); how many runs settled."""
    settled = 0
    for run in session.scalars(select(FinalRun).where(FinalRun.status == "running",
                                                      FinalRun.busy_until.is_not(None),
                                                      FinalRun.busy_until <= now())):
        retried = select(FinalTurn.id).where(FinalTurn.run_id == run.id,
                                             FinalTurn.round >= run.rounds,
                                             FinalTurn.status == "queued")
        for job in session.scalars(select(Job).where(Job.turn_id.in_(retried),
                                                     Job.state == "queued")):
            job.state, job.token_hash = "cancelled", None
        for turn in session.scalars(select(FinalTurn).where(FinalTurn.id.in_(retried))):
            turn.status, turn.finished_at = "expired", now()
        session.flush()
        settled += settle(session=session, run=run)
    return settled


def of_assignment(*, session: Session, assignment: Assignment) -> list[FinalRun]:
    return list(session.scalars(select(FinalRun).where(
        FinalRun.assignment_id == assignment.id).order_by(FinalRun.id.desc())))


def get(*, session: Session, assignment: Assignment, run_id: int) -> FinalRun:
    run = session.get(FinalRun, run_id) if 0 < run_id <= MAX_ROW_ID else None
    if run is None or run.assignment_id != assignment.id:
        raise NotFound(f"no final run {run_id} of {assignment.slug}")
    return run


def standings(*, session: Session, run: FinalRun) -> list[tuple[FinalGrade, str, str | None,
                                                                 float | None]]:
    """Each student's final grade of a finished run with their email, alias and live points
    (by email)."""
    rows = session.execute(
        select(FinalGrade, User.email, Enrollment.alias, GradeReportRow.score)
        .join(User, User.id == FinalGrade.user_id)
        .join(Enrollment, (Enrollment.user_id == FinalGrade.user_id)
              & (Enrollment.course_id == run.assignment.course_id))
        .outerjoin(GradeReportRow, GradeReportRow.submission_id == FinalGrade.submission_id)
        .where(FinalGrade.run_id == run.id).order_by(User.email))
    return [(g, email, alias, live) for g, email, alias, live in rows]


@dataclass(frozen=True)
class Progress:
    turns: int
    done: int
    failed: int
    runner_seconds: float  # the turns' wall time on runners so far
    busy: int = 0  # turns timed on a busy node (each timed again while the limit allows)


def progress(*, session: Session, run: FinalRun) -> Progress:
    rows = session.execute(select(FinalTurn.status, func.count(), func.sum(FinalTurn.timed_s))
                           .where(FinalTurn.run_id == run.id).group_by(FinalTurn.status)).all()
    n = {status: (int(count), float(secs or 0.0)) for status, count, secs in rows}
    return Progress(turns=sum(c for c, _ in n.values()), done=n.get("done", (0, 0.0))[0],
                    failed=n.get("failed", (0, 0.0))[0],
                    runner_seconds=round(sum(s for _, s in n.values()), 1),
                    busy=n.get("busy", (0, 0.0))[0])


def turns(*, session: Session, run: FinalRun) -> list[tuple[FinalTurn, str]]:
    """Every turn of the run with its student's email, by student then round."""
    return [(t, email) for t, email in session.execute(
        select(FinalTurn, User.email).join(User, User.id == FinalTurn.user_id)
        .where(FinalTurn.run_id == run.id).order_by(User.email, FinalTurn.round))]


def node_state(turn: FinalTurn) -> str:
    """What the node delivered around a turn's timed windows, in words."""
    if turn.node is None:
        return "not probed" if turn.status in ("done", "busy") else ""
    seen = Interference.model_validate(turn.node)
    words = ("busy" if node_was_busy(seen) else "free") + (
        f": {seen.short} of {seen.windows} windows short" if seen.short
        else f": all {seen.windows} windows whole")
    if seen.delivered is not None:
        words += f" (delivered {seen.delivered:.1f} of {seen.cores} cores)"
    if seen.waiting is not None:
        words += f"; the probes waited {seen.waiting:.0%} of their time for a CPU"
    if seen.baseline_waiting is not None:
        words += f"; the serial baseline waited {seen.baseline_waiting:.0%} of its calls for a CPU"
    if seen.pressure is not None:
        words += f"; CPU pressure {seen.pressure:.0f} %"
    return words


def start_due(*, session: Session, busy_wait_s: int = 0) -> int:
    """Start the platform's own final run of every assignment whose last deadline (extensions
    included) has passed and that has none yet (the caller commits); how many started."""
    started = 0
    has_run = select(FinalRun.assignment_id)
    # Every sweep asks (every few seconds): only assignments whose last deadline can lie in the
    # window are read, not every assignment that ever closed (an extension is never earlier
    # than the assignment's own deadline).
    since = now() - AUTO_WINDOW
    extended = select(Extension.assignment_id).where(Extension.deadline > since)
    for a in session.scalars(select(Assignment).where(
            Assignment.deadline.is_not(None), Assignment.deadline < now(),  # extensions.passed
            (Assignment.deadline > since) | Assignment.id.in_(extended),
            Assignment.current_version_id.is_not(None), Assignment.id.not_in(has_run))):
        deadline = last_deadline(session=session, assignment=a)
        due = deadline is not None and now() - AUTO_WINDOW < deadline \
            and extensions.passed(deadline, now())
        if not due or not counted(session=session, assignment=a):
            continue
        start(session=session, assignment=a, actor=None, role=None, busy_wait_s=busy_wait_s)
        started += 1
    return started
