"""Leaderboard: each student's best fully-correct submission, ranked by speedup; CI overlap = tie."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import case, delete, func, insert, literal, or_, select, update
from sqlalchemy.orm import Session

from server.models import (
    Assignment,
    BoardEntry,
    Enrollment,
    FinalGrade,
    GradeReportRow,
    Submission,
    Team,
    User,
)
from server.services.people import teams
from server.services.records import final_grades, manual_points

MARKS = {"held": "held for review", "refused": "speedup not credited",
         "pending": "performance pending: the node was busy"}
INTERFERED = "measured while the node was short of cores"
"""The mark of a ranked speedup the platform measured under interference (it may be low)."""
FINAL = "final run"
"""The mark of a figure and points the assignment's final run settled (others are provisional)."""
FINAL_BUSY = "final run: node busy, live points kept"
"""The mark of a student the final run could not time on a free node before its limit."""
FINAL_NONE = "final run: no speedup earned"
"""The mark of a student whose final run's rounds earned no speedup (unranked)."""


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
    mark: str | None = None  # why it is unranked, or what to know of its ranked figure
    tests: float = 0.0
    """The tests' part of `score` (after the late policy); the rest is performance points."""
    members: tuple[int, ...] = ()
    """A team's row: every member whose board submission it is (`user_id` is one of them)."""

    @property
    def performance(self) -> float:
        return round(self.score - self.tests, 2)


def _unranked() -> Any:
    """1 for a speedup the credit policy held or refused (and no instructor granted), else 0."""
    r = GradeReportRow
    return case((r.credit_status.in_(tuple(MARKS)) & or_(r.review.is_(None), r.review != "granted"),
                 1), else_=0)


def _best(assignment_id: int, user_id: int | None = None) -> Any:
    """(user_id, submission_id) of each student's best passed submission of those they share
    (their own, their team's: people/teams.py `sharers`): a ranked one first, then the highest
    credited speedup, then the score, then the earliest."""
    r = GradeReportRow
    pairs = teams.sharers()
    speedup = func.coalesce(r.credited_speedup, -1.0)
    nth = func.row_number().over(partition_by=pairs.c.uid,
                                 order_by=(_unranked(), speedup.desc(), r.score.desc(),
                                           Submission.id))
    ranked = (select(pairs.c.uid.label("user_id"), Submission.id.label("submission_id"),
                     nth.label("nth"))
              .join(pairs, pairs.c.sid == Submission.id)
              .join(r, r.submission_id == Submission.id)
              .where(Submission.assignment_id == assignment_id, r.verdict == "passed"))
    if user_id is not None:
        ranked = ranked.where(pairs.c.uid == user_id)
    sub = ranked.subquery()
    return select(sub.c.user_id, sub.c.submission_id).where(sub.c.nth == 1)


def refresh(*, session: Session, assignment_id: int, user_id: int) -> None:
    """Choose the student's board submission again, in the caller's transaction (after a grade
    lands, a regrade replaces one or a review decides: services/grades/grade_changes.py)."""
    # Two gradings of one student landing at once: the second waits for the first's commit
    # and then sees its report (PostgreSQL; SQLite writes one transaction at a time).
    session.execute(select(User.id).where(User.id == user_id).with_for_update())
    best = session.execute(_best(assignment_id, user_id)).first()
    entry = session.get(BoardEntry, (assignment_id, user_id))
    if best is None:
        if entry is not None:
            session.delete(entry)
    elif entry is None:
        session.add(BoardEntry(assignment_id=assignment_id, user_id=user_id,
                               submission_id=best.submission_id))
    else:
        entry.submission_id = best.submission_id
    _bump(session, assignment_id)


def _bump(session: Session, assignment_id: int) -> None:
    """A new board version: every cached copy of the old one is stale once this commits."""
    session.execute(update(Assignment).where(Assignment.id == assignment_id)
                    .values(board_version=Assignment.board_version + 1))
    session.flush()


def rebuild(*, session: Session, assignment_id: int) -> None:
    """Choose every student's board submission of one assignment again (a rescore)."""
    session.execute(delete(BoardEntry).where(BoardEntry.assignment_id == assignment_id))
    session.execute(insert(BoardEntry).from_select(
        ["assignment_id", "user_id", "submission_id"],
        select(literal(assignment_id), *_best(assignment_id).subquery().c)))
    _bump(session, assignment_id)


def entries(*, session: Session, assignment: Assignment) -> list[Entry]:
    """Ranked entries; an entry whose CI overlaps that of the entry holding the rank above (the
    first of its tie) shares that rank. Ties do not chain: with A ≈ B and B ≈ C but A and C
    apart, B shares A's rank and C takes its own place.

    One row per student comes from the board's own table (`refresh` keeps it), so the cost does
    not grow with the submissions the assignment holds. A speedup the credit policy held or
    refused (and no instructor granted) is never ranked: its student is listed below the ranked
    ones, with a mark.
    """
    r = GradeReportRow
    speedup = func.coalesce(r.credited_speedup, -1.0)
    rows = session.execute(
        select(BoardEntry.user_id, BoardEntry.submission_id, r.score, speedup.label("speed"),
               r.speedup_median, r.speedup_ci_low, r.speedup_ci_high, r.credit_status,
               r.timing_interfered, _unranked().label("unranked"), Enrollment.alias,
               r.report["test_points"].as_float().label("test_points"), Submission.late,
               Team.name.label("team"))
        .join(r, r.submission_id == BoardEntry.submission_id)
        .join(Submission, Submission.id == BoardEntry.submission_id)
        .outerjoin(Team, Team.id == Submission.team_id)
        .join(Enrollment, (Enrollment.user_id == BoardEntry.user_id)
              & (Enrollment.course_id == assignment.course_id))
        .where(BoardEntry.assignment_id == assignment.id, Enrollment.role == "student")
        .order_by(BoardEntry.user_id)).all()
    rows, teams_of = _one_row_a_team(rows)
    settled = final_grades.grades(session=session, assignment_id=assignment.id)
    # A final grade may name an earlier submission than the board's (one made after the run):
    # its points' parts are that submission's.
    older = {g.submission_id for g in settled.values()} - {row.submission_id for row in rows}
    parts = {sid: (tests, late) for sid, tests, late in session.execute(
        select(r.submission_id, r.report["test_points"].as_float(), Submission.late)
        .join(Submission, Submission.id == r.submission_id)
        .where(r.submission_id.in_(older)))} if older else {}
    board: list[Any] = [_settled(row, settled[row.user_id], parts) if row.user_id in settled
                        else row for row in rows]
    ordered = sorted(board, key=lambda x: (x.unranked, -float(x.speed), -x.score, x.submission_id))
    out: list[Entry] = []
    for i, row in enumerate(ordered):
        members, alias = teams_of.get(row.submission_id, ((), row.alias or f"student-{row.user_id}"))
        tests = min(assignment.after_late_policy(row.test_points or 0.0, row.late), row.score)
        if row.unranked:
            out.append(Entry(rank=None, tied=False, user_id=row.user_id, alias=alias,
                             submission_id=row.submission_id, speedup=row.speedup_median,
                             ci_low=row.speedup_ci_low, ci_high=row.speedup_ci_high,
                             score=row.score, tests=tests, mark=row.mark
                             if isinstance(row, _Settled) else MARKS[row.credit_status],
                             members=members))
            continue
        speed = float(row.speed) if row.speed >= 0 else None
        lo, hi = row.speedup_ci_low, row.speedup_ci_high
        if speed is not None and lo is not None and hi is not None \
                and row.speedup_median is not None and speed < row.speedup_median:
            lo, hi = min(lo, speed), min(hi, speed)  # capped: no more than the credited figure
        tied, rank = False, i + 1
        prev = out[-1] if out else None
        head = next((e for e in out if prev is not None and e.rank == prev.rank), None)
        if head is not None and head.rank is not None and speed is not None \
                and head.speedup is not None and lo is not None and head.ci_low is not None \
                and hi is not None and hi >= head.ci_low:
            tied, rank = True, head.rank
            if not head.tied:
                out[out.index(head)] = replace(head, tied=True)
        out.append(Entry(rank=rank, tied=tied, user_id=row.user_id, alias=alias,
                         submission_id=row.submission_id, speedup=speed, ci_low=lo, ci_high=hi,
                         score=row.score, tests=tests, mark=row.mark
                         if isinstance(row, _Settled)
                         else INTERFERED if row.timing_interfered else None, members=members))
    return out


def _one_row_a_team(rows: Sequence[Any]
                    ) -> tuple[list[Any], dict[int, tuple[tuple[int, ...], str]]]:
    """A team's members whose board submission is the team's one submission are one row, named
    "team: alias, alias"; (the rows, each team row's submission -> (members, name))."""
    kept: list[Any] = []
    named: dict[int, tuple[tuple[int, ...], str]] = {}
    first: dict[int, Any] = {}
    for row in rows:
        if row.team is None:
            kept.append(row)
        elif row.submission_id in first:
            members, _ = named[row.submission_id]
            named[row.submission_id] = ((*members, row.user_id), "")
        else:
            first[row.submission_id] = row
            named[row.submission_id] = ((row.user_id,), "")
            kept.append(row)
    for sid, (members, _) in named.items():
        aliases = [r.alias or f"student-{r.user_id}" for r in rows
                   if r.submission_id == sid and r.user_id in members]
        named[sid] = (members, f"{first[sid].team}: {', '.join(aliases)}")
    return kept, named


@dataclass(frozen=True)
class _Settled:
    """A board row whose figure and points a final run settled."""

    user_id: int
    submission_id: int
    score: float
    speed: float
    speedup_median: float | None
    speedup_ci_low: float | None
    speedup_ci_high: float | None
    credit_status: str | None
    timing_interfered: bool
    unranked: int
    alias: str | None
    test_points: float | None
    late: bool
    mark: str


def _settled(row: Any, grade: FinalGrade,
             parts: dict[int, tuple[float | None, bool]]) -> _Settled:
    """The row as the final run settled it: its median speedup and the range of its rounds,
    its final points; ranked only where the final run earned a speedup. A student the run
    could not time on a free node keeps the live row, marked so."""
    if grade.node_busy:
        unranked, mark = row.unranked, FINAL_BUSY
    else:
        unranked, mark = int(grade.speedup is None), FINAL if grade.speedup is not None \
            else FINAL_NONE
    test_points, late = parts.get(grade.submission_id, (row.test_points, row.late))
    return _Settled(user_id=row.user_id, submission_id=grade.submission_id, score=grade.score,
                    speed=grade.speedup if grade.speedup is not None else -1.0,
                    speedup_median=grade.speedup, speedup_ci_low=grade.range_low,
                    speedup_ci_high=grade.range_high, credit_status=row.credit_status,
                    timing_interfered=False, unranked=unranked, alias=row.alias,
                    test_points=test_points, late=late, mark=mark)


@dataclass
class Board:
    """One version of an assignment's board: its entries and their renderings (`rows`), each
    rendering made once per version."""

    entries: list[Any]  # Entry, or CourseEntry on a course board: each has a user_id
    _row_of: dict[int, int] = field(default_factory=dict)  # user id -> index in entries
    _views: dict[str, list[Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._row_of = {uid: i for i, e in enumerate(self.entries)
                        for uid in (getattr(e, "members", ()) or (e.user_id,))}

    def rows(self, name: str, render: Callable[[Any, bool], Any], reader_id: int) -> list[Any]:
        """`render(entry, you)` of every entry as `reader_id` sees the board: the others' rows are
        rendered once per version and `name` (one name per way of rendering), the reader's own
        row (you=True) on each call."""
        with self._lock:
            if name not in self._views:
                self._views[name] = [render(e, False) for e in self.entries]
            rows = self._views[name]
        mine = self._row_of.get(reader_id)
        if mine is None:
            return rows
        return [*rows[:mine], render(self.entries[mine], True), *rows[mine + 1:]]


class BoardCache:
    """The latest computed board of each assignment, per server process, keyed by the
    assignment's `board_version`: a request reads the version with the assignment and computes
    the board only when it changed (2 000 students: ≈ 30 ms of Python once, not per request).
    A board computed after the version was read is at least as new as that version."""

    def __init__(self, size: int = 64) -> None:
        self._boards: OrderedDict[Hashable, tuple[Any, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self._size = size

    def get(self, key: Hashable, version: Any, compute: Callable[[], Any]) -> Any:
        """`compute()` for this version of `key`'s board, or the cached answer."""
        with self._lock:
            hit = self._boards.get(key)
            if hit is not None and hit[0] == version:
                self._boards.move_to_end(key)
                return hit[1]
        value = compute()
        with self._lock:
            old = self._boards.get(key)
            if old is None or old[0] <= version:
                self._boards[key] = (version, value)
                self._boards.move_to_end(key)
                while len(self._boards) > self._size:
                    self._boards.popitem(last=False)
        return value

    def board(self, *, session: Session, assignment: Assignment) -> Board:
        """This version of the assignment's board."""
        board: Board = self.get(assignment.id, assignment.board_version,
                                lambda: Board(entries(session=session, assignment=assignment)))
        return board

    def course_board(self, *, session: Session, assignments: list[Assignment]) -> CourseBoard:
        """The course board over these assignments (each one's board from this cache); a new
        version whenever one of their boards changes or the list of assignments does."""
        version = tuple((a.id, a.board_version) for a in assignments)
        key = ("course", assignments[0].course_id if assignments else None)
        board: CourseBoard = self.get(key, version, lambda: course_board(
            [(a, self.board(session=session, assignment=a)) for a in assignments],
            {a.id: manual_points.released_points(session=session, assignment=a)
             for a in assignments}))
        return board


@dataclass(frozen=True)
class Task:
    slug: str
    title: str


@dataclass(frozen=True)
class CourseEntry:
    """One student's line of a course board: points over every task, and each task's entry on
    its own board (None: nothing passed yet)."""

    rank: int
    tied: bool  # the same total, over as many tasks, as another student
    user_id: int
    alias: str
    total: float
    solved: int
    tasks: tuple[Entry | None, ...]
    manual: float = 0.0
    """Released hand-graded points in `total` (the rest: the tasks' tests and performance)."""

    @property
    def tests(self) -> float:
        return round(sum(t.tests for t in self.tasks if t is not None), 2)

    @property
    def performance(self) -> float:
        return round(sum(t.performance for t in self.tasks if t is not None), 2)


@dataclass
class CourseBoard(Board):
    tasks: list[Task] = field(default_factory=list)


def course_board(boards: list[tuple[Assignment, Board]],
                 manual: dict[int, dict[int, float]] | None = None) -> CourseBoard:
    """Students by total points across the course's assignments (each task's points are those
    of the submission its own board shows, so late policy and reviews count the same, plus the
    released manual points, `manual`: assignment id -> user id -> points), then by tasks
    solved; the same total over as many tasks shares a rank. A student is listed once they pass
    one task."""
    manual = manual or {}
    cells: dict[int, list[Entry | None]] = {}
    for i, (_, board) in enumerate(boards):
        for e in board.entries:
            cells.setdefault(e.user_id, [None] * len(boards))[i] = e
    rows = []
    for user_id, cell in cells.items():
        alias = next(e.alias for e in cell if e is not None)
        by_hand = sum(manual.get(a.id, {}).get(user_id, 0.0) for a, _ in boards)
        rows.append((round(sum(e.score for e in cell if e is not None) + by_hand, 2),
                     sum(e is not None for e in cell), alias, user_id, tuple(cell), by_hand))
    rows.sort(key=lambda r: (-r[0], -r[1], r[2], r[3]))
    out: list[CourseEntry] = []
    for i, (total, solved, alias, user_id, tasks, by_hand) in enumerate(rows):
        prev = out[-1] if out else None
        tied = prev is not None and (prev.total, prev.solved) == (total, solved)
        if tied and prev is not None and not prev.tied:
            out[-1] = replace(prev, tied=True)
        out.append(CourseEntry(rank=prev.rank if tied and prev else i + 1, tied=tied,
                               user_id=user_id, alias=alias, total=total, solved=solved,
                               tasks=tasks, manual=round(by_hand, 2)))
    return CourseBoard(entries=out, tasks=[Task(a.slug, a.title) for a, _ in boards])
