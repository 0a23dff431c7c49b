"""How a class is doing on an assignment: who started and finished, scores, every test's pass
rate, speedups against the reference, credit outcomes, and when the class submitted.

Every count is an SQL aggregate over the assignment's submissions; what reaches Python is one
row per student (a class of 2 000: 2 000 rows, however many submissions), one per test or one
per day, never one per submission; the one exception is SQLite's per-day durations (below).
Medians and standard deviations are taken in Python over those per-student values, which every
database can give (SQLite has no percentile function).

Terms, for each student enrolled as a student:

- **first try / final**: the student's first and latest graded submission; a test's pass rate
  is over those (how many passed it at once, how many in the end).
- **best / latest score**: the highest score of any of their submissions; the latest graded
  one's.
- **discrimination**: the correlation between passing a test (1 or 0) and the final graded
  score (before any late penalty), over the final submissions (point-biserial). A test that
  weak and strong students pass alike, or fail alike, has one near 0 or below: a broken test,
  or one that measures something other than the rest (see `LOW_DISCRIMINATION`).
- **speedup**: the measured speedup of each student's board submission (their best passed one),
  against the reference's and the scoring curve's marks.
- **queue wait / grading time**, per day a grading was queued: from a grading job's queueing
  to the claim of the attempt that finished it, and from that claim to its end (a job handed
  back or retried waits again), over the assignment's finished grading jobs, regrades
  included. PostgreSQL takes the percentiles in SQL (`percentile_cont`); SQLite, which has no
  percentile function and serves small classes only, reads the two durations per job.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Float, Integer, and_, case, cast, func, select
from sqlalchemy.orm import Session

from runners.protocol import Manifest
from server import db
from server.models import (
    Assignment,
    BoardEntry,
    Enrollment,
    GradeReportRow,
    Job,
    PracticeRun,
    ScalingPointRow,
    Submission,
    TestResultRow,
    User,
    aware,
)
from server.services.grades import reference
from server.services.people import teams

LOW_DISCRIMINATION = 0.1
"""Below this correlation with the final score a test is flagged: passing it says little about
how well a student did on the rest (classical test theory's usual floor for a useful item)."""

MESSAGES_KEPT = 3
"""Failure messages shown per test, the commonest first."""

HISTOGRAM_BINS = 10

_NUMBER = re.compile(r"(?<![A-Za-z_])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
_PATH = re.compile(r"(?:/[\w.@-]+)+/?")
_HEX = re.compile(r"0x[0-9a-fA-F]+")


def normalised(message: str) -> str:
    """A failure message with what differs between students' runs taken out (numbers, paths,
    addresses), so that the same failure groups together."""
    first = message.strip().splitlines()[0][:300] if message.strip() else "(no message)"
    return _NUMBER.sub("N", _PATH.sub("<path>", _HEX.sub("<address>", first)))


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float | None
    median: float | None
    sd: float | None

    @staticmethod
    def of(values: list[float]) -> Summary:
        if not values:
            return Summary(0, None, None, None)
        return Summary(len(values), statistics.fmean(values), statistics.median(values),
                       statistics.stdev(values) if len(values) > 1 else 0.0)


@dataclass(frozen=True)
class Student:
    user_id: int
    name: str
    email: str
    alias: str
    submissions: int
    best: float | None
    latest: float | None
    passed: bool
    full: bool
    first_at: datetime | None
    first_pass_at: datetime | None
    first_id: int | None = None  # their first graded submission
    last_id: int | None = None  # their latest graded submission
    practice_runs: int = 0  # practice runs (never graded: apart from every score here)


@dataclass(frozen=True)
class TestStat:
    name: str
    hidden: bool
    first_total: int
    first_passed: int
    final_total: int
    final_passed: int
    discrimination: float | None
    failures: list[tuple[str, int, int]]  # (normalised message, count, an example submission)

    @property
    def final_rate(self) -> float | None:
        return self.final_passed / self.final_total if self.final_total else None

    @property
    def first_rate(self) -> float | None:
        return self.first_passed / self.first_total if self.first_total else None

    @property
    def flagged(self) -> bool:
        return self.discrimination is not None and self.discrimination < LOW_DISCRIMINATION


@dataclass(frozen=True)
class Day:
    """The gradings queued on one day (UTC): their queue wait and grading time in seconds."""

    day: datetime
    jobs: int
    wait_p50: float
    wait_p95: float
    run_p50: float
    run_p95: float


@dataclass(frozen=True)
class Point:
    """The class at one worker count: the median of the board submissions' speedups there,
    how many had one, and their quartiles."""

    workers: int
    median: float
    students: int
    low: float
    high: float

    @staticmethod
    def of(workers: int, values: list[float]) -> Point:
        return Point(workers, statistics.median(values), len(values), _percentile(values, 0.25),
                     _percentile(values, 0.75))


@dataclass(frozen=True)
class AssignmentStats:
    students: list[Student]
    max_score: float | None
    tests: list[TestStat]
    speedups: list[float]  # each student's board submission's measured speedup
    credited_speedups: list[float]  # …and the speedup its points come from (0: none)
    reference_speedup: float | None
    speedup_min: float | None
    speedup_full: float | None
    credit: dict[str, int]  # over final submissions: credited, capped, held, refused
    scaling: list[Point]  # the class's median scaling curve
    per_hour: list[tuple[datetime, int]]
    deadline: datetime | None
    days: list[Day] = field(default_factory=list)
    hours_to_pass: Summary = field(default_factory=lambda: Summary(0, None, None, None))

    @property
    def enrolled(self) -> int:
        return len(self.students)

    @property
    def submitted(self) -> int:
        return sum(1 for s in self.students if s.submissions)

    @property
    def passed(self) -> int:
        return sum(1 for s in self.students if s.passed)

    @property
    def full(self) -> int:
        return sum(1 for s in self.students if s.full)

    @property
    def not_started(self) -> list[Student]:
        return [s for s in self.students if not s.submissions]

    @property
    def best(self) -> Summary:
        return Summary.of([s.best for s in self.students if s.best is not None])

    @property
    def latest(self) -> Summary:
        return Summary.of([s.latest for s in self.students if s.latest is not None])


def _students(session: Session, a: Assignment) -> tuple[list[Student], float | None]:
    s, r = Submission, GradeReportRow
    # One pass over the assignment's submissions (its index), no join: the grade reports are
    # read only for the students' latest submissions, by id.
    # On team work a team's submission is each member's of that moment (people/teams.py).
    owner = (pairs := teams.sharers()).c.uid if teams.team_work(a) else s.user_id
    q = select(owner.label("user_id"), func.count(s.id).label("n"),
               func.min(s.created_at).label("first_at"), func.max(s.score).label("best"),
               func.min(case((s.verdict == "passed", s.created_at))).label("first_pass_at"),
               func.max(case((s.status == "graded", s.id))).label("last_id"),
               func.min(case((s.status == "graded", s.id))).label("first_id"))
    if teams.team_work(a):
        q = q.join(pairs, pairs.c.sid == s.id)
    per = q.where(s.assignment_id == a.id).group_by(owner).subquery()
    latest = Submission.__table__.alias("latest")
    rows = session.execute(
        select(User.id, User.name, User.email, Enrollment.alias, per.c.n, per.c.best,
               latest.c.score, per.c.first_pass_at, per.c.first_at, per.c.first_id,
               per.c.last_id)
        .join(Enrollment, and_(Enrollment.user_id == User.id,
                               Enrollment.course_id == a.course_id))
        .outerjoin(per, per.c.user_id == User.id)
        .outerjoin(latest, latest.c.id == per.c.last_id)
        .where(Enrollment.role == "student").order_by(User.name, User.id)).all()
    lasts = [row[-1] for row in rows if row[-1] is not None]
    max_score = session.scalar(select(func.max(r.max_score)).where(
        db.among(session, r.submission_id, lasts))) if lasts else None
    practised = dict(session.execute(
        select(PracticeRun.user_id, func.count(PracticeRun.id))
        .where(PracticeRun.assignment_id == a.id).group_by(PracticeRun.user_id)).tuples().all())
    out = []
    for uid, name, email, alias, n, best, last, first_pass, first_at, first_id, last_id in rows:
        full = bool(max_score and best is not None and best >= max_score - 1e-9)
        out.append(Student(uid, name, email, alias or "", int(n or 0), best, last,
                           first_pass is not None, full,
                           aware(first_at) if first_at else None,
                           aware(first_pass) if first_pass else None, first_id, last_id,
                           int(practised.get(uid, 0))))
    return out, max_score


def _tests(session: Session, first_ids: list[int], last_ids: list[int]) -> list[TestStat]:
    """Each test over the students' first and latest graded submissions, found by their reports'
    ids (both tables filtered by them: index lookups, where a join on the submission ids alone
    had PostgreSQL scan every test result of the course)."""
    t, r = TestResultRow, GradeReportRow
    report_of: dict[int, int] = {sid: rid for sid, rid in session.execute(
        select(r.submission_id, r.id).where(db.among(session, r.submission_id,
                                                   first_ids + last_ids)))}
    passed = cast(case((t.outcome == "passed", 1), else_=0), Integer)
    counts: dict[str, dict[str, object]] = {}
    score = cast(r.score, Float)  # the graded score (before any late penalty)
    for last, ids in ((False, first_ids), (True, last_ids)):
        reports = [report_of[i] for i in ids if i in report_of]
        rows = session.execute(
            select(t.name, func.max(cast(t.hidden, Integer)), func.count(), func.sum(passed),
                   func.sum(score), func.sum(score * score), func.sum(passed * score))
            .join(r, r.id == t.report_id)
            .where(db.among(session, t.report_id, reports), db.among(session, r.id, reports))
            .group_by(t.name))
        for name, hidden, n, k, sy, syy, sxy in rows:
            c = counts.setdefault(name, {"hidden": bool(hidden)})
            c["final" if last else "first"] = (int(n), int(k or 0))
            if last:
                c["r"] = _correlation(int(n), int(k or 0), float(sy or 0), float(syy or 0),
                                      float(sxy or 0))
    failures: dict[str, Counter[str]] = defaultdict(Counter)
    example: dict[tuple[str, str], int] = {}
    submission_of = {rid: sid for sid, rid in report_of.items()}
    for name, message, n, rid in session.execute(
            select(t.name, t.message, func.count(), func.min(t.report_id))
            .where(db.among(session, t.report_id,
                          [report_of[i] for i in last_ids if i in report_of]),
                   t.outcome != "passed")
            .group_by(t.name, t.message)):
        key = normalised(message)
        failures[name][key] += int(n)
        example.setdefault((name, key), submission_of[int(rid)])
    out = []
    for name, c in counts.items():
        first, final = c.get("first", (0, 0)), c.get("final", (0, 0))
        out.append(TestStat(
            name=name, hidden=bool(c["hidden"]), first_total=first[0],  # type: ignore[index]
            first_passed=first[1], final_total=final[0], final_passed=final[1],  # type: ignore[index]
            discrimination=c.get("r"),  # type: ignore[arg-type]
            failures=[(m, k, example[(name, m)])
                      for m, k in failures[name].most_common(MESSAGES_KEPT)]))
    # The tests the class fails most first (finally), then the least discriminating.
    return sorted(out, key=lambda x: (x.final_rate if x.final_rate is not None else 2,
                                      x.discrimination if x.discrimination is not None else 2,
                                      x.name))


def _correlation(n: int, sx: int, sy: float, syy: float, sxy: float) -> float | None:
    """Pearson's r between a 0/1 variable (its sum `sx`; x² = x) and y, from the sums."""
    vx, vy = n * sx - sx * sx, n * syy - sy * sy
    if n < 3 or vx <= 0 or vy <= 1e-12:
        return None
    return (n * sxy - sx * sy) / math.sqrt(vx * vy)


def _per_hour(session: Session, a: Assignment) -> list[tuple[datetime, int]]:
    s = Submission
    if session.get_bind().dialect.name == "postgresql":
        hour = func.date_trunc("hour", s.created_at)
    else:  # SQLite keeps an ISO text: its first 13 characters are the hour
        hour = func.substr(s.created_at, 1, 13)
    rows = session.execute(select(hour, func.count()).where(s.assignment_id == a.id)
                           .group_by(hour).order_by(hour))
    out = []
    for h, n in rows:
        at = h if isinstance(h, datetime) else datetime.fromisoformat(f"{h.replace(' ', 'T')}:00")
        out.append((aware(at), int(n)))
    return out


def _percentile(values: list[float], q: float) -> float:
    """As PostgreSQL's percentile_cont: linear between the two nearest ranks."""
    v = sorted(values)
    at = q * (len(v) - 1)
    lo = math.floor(at)
    return v[lo] + (v[min(lo + 1, len(v) - 1)] - v[lo]) * (at - lo)


def _days(session: Session, assignment_id: int) -> list[Day]:
    j, s = Job, Submission
    finished = (s.assignment_id == assignment_id, j.kind == "grade", j.claimed_at.is_not(None),
                j.finished_at.is_not(None))
    if session.get_bind().dialect.name == "postgresql":
        day = func.date_trunc("day", func.timezone("UTC", j.created_at))  # a UTC day
        rows = session.execute(
            select(day, func.count(), *(func.percentile_cont(q).within_group(x)
                                        for x in (j.claimed_at - j.created_at,
                                                  j.finished_at - j.claimed_at)
                                        for q in (0.5, 0.95)))
            .join(s, s.id == j.submission_id).where(*finished).group_by(day).order_by(day))
        return [Day(aware(d), int(n), *(max(v.total_seconds(), 0.0) for v in q))
                for d, n, *q in rows]
    per: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for queued, claimed, done in session.execute(
            select(j.created_at, j.claimed_at, j.finished_at)
            .join(s, s.id == j.submission_id).where(*finished)):
        assert claimed is not None and done is not None  # as the query asks
        waits, runs = per[aware(queued).date().isoformat()]
        waits.append(max((claimed - queued).total_seconds(), 0.0))
        runs.append(max((done - claimed).total_seconds(), 0.0))
    return [Day(aware(datetime.fromisoformat(d)), len(w), _percentile(w, 0.5),
                _percentile(w, 0.95), _percentile(r, 0.5), _percentile(r, 0.95))
            for d, (w, r) in sorted(per.items())]


def of_assignment(*, session: Session, assignment: Assignment) -> AssignmentStats:
    """The class's statistics on one assignment (staff only: names of those not started)."""
    a = assignment
    if session.get_bind().dialect.name != "postgresql":
        return _of_assignment(session, a, lambda: _days(session, a.id))
    with ThreadPoolExecutor(1) as pool:
        # The per-day percentiles (sorts over every grading job, the costliest query here) run
        # on a second connection of their own while the rest is read.
        days = pool.submit(_days_apart, session.get_bind(), a.id)
        return _of_assignment(session, a, days.result)


def _days_apart(bind: Any, assignment_id: int) -> list[Day]:
    with Session(bind) as apart:
        return _days(apart, assignment_id)


def _of_assignment(session: Session, a: Assignment, days: Callable[[], list[Day]]
                   ) -> AssignmentStats:
    students, max_score = _students(session, a)
    r = GradeReportRow
    board = session.execute(select(r.speedup_median, r.credited_speedup).join(
        BoardEntry, BoardEntry.submission_id == r.submission_id).where(
        BoardEntry.assignment_id == a.id, r.speedup_median.is_not(None))).all()
    speedups = sorted(float(v) for v, _ in board if v is not None)
    credited = sorted(float(c or 0.0) for _, c in board)  # one that earns nothing counts 0
    firsts = [x.first_id for x in students if x.first_id is not None]
    lasts = [x.last_id for x in students if x.last_id is not None]
    credit = {str(k): int(n) for k, n in session.execute(
        select(r.credit_status, func.count()).where(
            db.among(session, r.submission_id, lasts), r.credit_status.is_not(None))
        .group_by(r.credit_status))}
    per_workers: dict[int, list[float]] = defaultdict(list)
    for w, sp in session.execute(select(ScalingPointRow.workers, ScalingPointRow.speedup)
                                 .join(r, r.id == ScalingPointRow.report_id)
                                 .join(BoardEntry, BoardEntry.submission_id == r.submission_id)
                                 .where(BoardEntry.assignment_id == a.id)):
        per_workers[int(w)].append(float(sp))
    version = a.current_version
    try:
        scoring = Manifest.model_validate(version.manifest).scoring if version else None
    except ValidationError:  # a package stored before a rule was added: no curve to mark
        scoring = None
    to_pass = [(s.first_pass_at - s.first_at).total_seconds() / 3600 for s in students
               if s.first_pass_at is not None and s.first_at is not None]
    return AssignmentStats(
        students=students, max_score=max_score, tests=_tests(session, firsts, lasts),
        speedups=speedups, credited_speedups=credited,
        reference_speedup=None if version is None else reference.speedup(session=session,
                                                                         version=version),
        speedup_min=a.speedup_min or (scoring.speedup_min if scoring else None),
        speedup_full=a.speedup_full or (scoring.speedup_full if scoring else None), credit=credit,
        scaling=[Point.of(w, v) for w, v in sorted(per_workers.items())],
        per_hour=_per_hour(session, a),
        deadline=aware(a.deadline) if a.deadline else None, days=days(),
        hours_to_pass=Summary.of(to_pass))


def histogram(values: list[float], low: float, high: float, bins: int = HISTOGRAM_BINS
              ) -> list[tuple[float, float, int]]:
    """(from, to, count) over [low, high] in equal bins; the top bin holds `high` itself."""
    if high <= low:
        high = low + 1
    width = (high - low) / bins
    counts = [0] * bins
    for v in values:
        k = min(bins - 1, max(0, int((v - low) / width)))
        counts[k] += 1
    return [(low + k * width, low + (k + 1) * width, counts[k]) for k in range(bins)]


def window(stats: AssignmentStats) -> tuple[datetime, datetime] | None:
    """The hours the class submitted in, the deadline included."""
    hours = [h for h, _ in stats.per_hour] + ([stats.deadline] if stats.deadline else [])
    if not hours:
        return None
    return min(hours), max(hours) + timedelta(hours=1)


def speedups_of(*, session: Session, submission_ids: list[int]) -> dict[int, float]:
    """The measured speedup of each of these submissions that has one (a student's own history:
    their score and speedup attempt by attempt)."""
    r = GradeReportRow
    if not submission_ids:
        return {}
    return {int(sid): float(v) for sid, v in session.execute(
        select(r.submission_id, r.speedup_median).where(
            r.submission_id.in_(submission_ids), r.speedup_median.is_not(None)))
        if v is not None}
