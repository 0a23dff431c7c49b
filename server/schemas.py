"""API models (separate from tables): XCreate / XUpdate / XPublic."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

from runners.protocol import Shown, SimilarPair, text
from server.security import MAX_PASSWORD_CHARS, MIN_PASSWORD_CHARS


def _utc(value: datetime) -> datetime:
    # SQLite keeps no UTC offset (every stored time is UTC): a naive time read back is UTC.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


UtcDatetime = Annotated[datetime, AfterValidator(_utc)]
"""A time in a response: always with its offset (RFC 3339 `date-time`), in UTC."""


def _lines(value: object, field: str) -> None:
    """Every text in `value` (lists and dicts too) is a line without control characters
    (server/text.py); a password may hold anything but NUL (it is never shown)."""
    if isinstance(value, str):
        if field == "password":
            if "\x00" in value:
                raise ValueError("must not contain NUL characters")
        else:
            text.check(value, "the text")
    elif isinstance(value, list | tuple | set):
        for item in value:
            _lines(item, field)
    elif isinstance(value, dict):
        for key, item in value.items():
            _lines(key, field)
            _lines(item, field)


class Input(BaseModel):
    """A request body: no text may hold a control character (server/text.py: NUL, which
    PostgreSQL text cannot store, ESC, BEL, bidirectional overrides …), in any field."""

    @field_validator("*", mode="after")
    @classmethod
    def _no_controls(cls, value: object, info: ValidationInfo) -> object:
        _lines(value, info.field_name or "")
        return value


class Paragraphs(Input):
    """A body some of whose fields are text of several lines (MULTILINE): line breaks and tabs
    pass there, every other control character is refused as everywhere."""

    MULTILINE: ClassVar[frozenset[str]] = frozenset()

    @field_validator("*", mode="after")
    @classmethod
    def _no_controls(cls, value: object, info: ValidationInfo) -> object:
        name = info.field_name or ""
        if name in cls.MULTILINE and isinstance(value, str):
            if (why := text.paragraphs_problem(value, "the text")) is not None:
                raise ValueError(why)
            return value
        return super()._no_controls(value, info)


class Public(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class ErrorPublic(BaseModel):
    """Every error: a message a person can act on (and, for packages, each problem)."""

    detail: str
    problems: list[dict[str, str]] | None = None


class UserCreate(Input):
    email: str = Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$", max_length=320)
    name: str = Field(min_length=1, max_length=200)
    password: str = Field(min_length=MIN_PASSWORD_CHARS, max_length=MAX_PASSWORD_CHARS,
                          description="Not easy to guess (see docs/security.md); a passphrase "
                                      "of a few words is good")
    join_code: str = Field(min_length=4, max_length=32)
    alias: str | None = Field(default=None, max_length=64, pattern=r"^[\w .-]+$")


class TokenCreate(Input):
    email: str = Field(max_length=320)
    password: str = Field(max_length=MAX_PASSWORD_CHARS)


class TokenPublic(BaseModel):
    token: str
    token_type: Literal["bearer"] = "bearer"


class UserPublic(Public):
    id: int
    email: str
    name: str
    is_instructor: bool


class SessionPublic(BaseModel):
    """A browser session: send csrf_token as X-CSRF-Token with every write."""

    csrf_token: str
    user: UserPublic


class CourseCreate(Input):
    slug: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    title: str = Field(min_length=1, max_length=200)


class CoursePublic(Public):
    slug: str
    title: str
    role: str
    join_code: str | None = Field(default=None, description="Shown to instructors only")


class JoinCreate(Input):
    join_code: str = Field(min_length=4, max_length=32)
    alias: str | None = Field(default=None, max_length=64, pattern=r"^[\w .-]+$")


class ImportCreate(Input):
    path: str = Field(description="Package folder relative to the server's assignments dir, "
                      "e.g. treasure-hunt/t1-multiprocessing", max_length=300)


class VersionPublic(Public):
    version: str
    validation: str = Field(description="validating | ready | invalid | error")
    checks: list[dict[str, Any]] | None


class ShownIn(Input):
    hidden_tests: Shown | None = Field(description="never, after_deadline (each student's own, "
                                       "extensions included) or always; null: as the package says")


class AssignmentPublic(Public):
    slug: str
    title: str
    version: str
    deadline: UtcDatetime | None
    your_deadline: UtcDatetime | None = Field(
        default=None, description="Your own deadline, when an instructor extended it")
    late_policy: str
    late_penalty: float
    quota_count: int
    quota_window_s: int
    hidden_tests_shown: Shown | None = Field(
        default=None, description="When students read a hidden test's whole message (None: as "
        "the package's [feedback] says, per test where it names one)")
    speedup_min: float = Field(description="Speedup that starts earning performance points")
    speedup_full: float = Field(description="Speedup that earns all of them")
    kind: str
    entry_file: str
    allowed_files: list[str]
    validation: str = Field(description="validating | ready | invalid | error (runner-side checks)")
    readiness: str | None = Field(
        default=None, description="While students cannot submit yet, why, in the words the course "
                                  "page shows ('waiting for a GPU runner', 'being checked, ready "
                                  "in about 40 s'); null once they can")
    checks: list[dict[str, Any]] | None = Field(
        default=None, description="Each validation check and its problems (instructors only)")
    candidate: VersionPublic | None = Field(
        default=None, description="The newest import when students are not getting it yet "
                                  "(validating, or failed its checks); instructors only")


ISO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")  # how every ISO 8601 time starts


def a_date_not_a_number(value: object) -> object:
    """A time is ISO 8601 text or null: pydantic would read a JSON number, or a string of digits
    ("0", "-1", "1700000000"), as seconds since 1970."""
    if value is None or isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not ISO_TIME.match(value.strip()):
        raise ValueError("a deadline is a date and time (ISO 8601, e.g. 2026-12-01T23:59:00Z), "
                         "not a number")
    return value


def deadline_in_range(value: datetime | None) -> datetime | None:
    # Stored in UTC: 9999-12-31T23:59-12:00 would be in the year 10000 (OverflowError).
    if value is not None and value.tzinfo is not None:
        try:
            value.astimezone(UTC)
        except OverflowError as exc:
            raise ValueError("out of range: it must fall in the years 1 to 9999 in UTC") from exc
    return value


class ExtensionCreate(Input):
    deadline: Annotated[datetime, BeforeValidator(a_date_not_a_number),
                        AfterValidator(deadline_in_range)] = Field(
        description="The student's own deadline, with a time zone; after the assignment's")
    reason: str = Field(default="", max_length=500)


class ExtensionPublic(Public):
    email: str
    name: str
    deadline: UtcDatetime
    reason: str
    granted_at: UtcDatetime


class MemberPublic(Public):
    email: str
    name: str
    alias: str | None
    role: str | None = Field(description="instructor | ta | student; None: on the roster, no "
                                         "account yet (enrolled when they register or arrive "
                                         "from the LMS)")
    on_roster: bool
    lms_email: str | None = Field(default=None, description="The email this course's LMS "
                                  "asserted for an account launched from it (unverified: the "
                                  "account owns it only where the operator trusts that LMS)")


class RoleUpdate(Input):
    role: Literal["instructor", "ta", "student"]


class RosterRowPublic(Public):
    line: int = Field(description="The row's line in the CSV (the header is line 1)")
    email: str
    outcome: Literal["enrolled", "invited", "updated", "unchanged", "refused"]
    detail: str


class RosterImportPublic(BaseModel):
    counts: dict[str, int]
    rows: list[RosterRowPublic]


class SubmissionPublic(Public):
    id: int
    assignment: str
    student: str | None = Field(default=None, description="Its owner's email (in the course "
                                                          "staff's list of submissions)")
    status: str
    verdict: str | None
    score: float | None
    late: bool
    filenames: list[str]
    created_at: UtcDatetime
    finished_at: UtcDatetime | None
    queue: str | None = Field(default=None, description="cpu | mpi | gpu: where it is graded")
    queue_position: int | None = None
    waiting_for: str | None = Field(
        default=None, description="Why a queued submission is not moving (no live runner serves "
                                  "its queue), e.g. 'waiting for a GPU runner'")
    report: dict[str, Any] | None = Field(default=None, description="The GradeReport")
    final_score: float | None = Field(
        default=None, description="The points the assignment's final run settled for this "
        "submission, which count instead of `score` (None: no final run timed it; `score` is "
        "provisional)")
    final_speedup: float | None = Field(
        default=None, description="The final run's figure: the median of its rounds")


class RunnerPublic(Public):
    name: str
    queues: list[str]
    capabilities: dict[str, Any] = Field(description="cores, memory_mb, gpus, gpu_model, mpi, "
                                                     "backend, image, protocol_version")
    current_job_id: int | None
    first_seen: UtcDatetime
    last_seen: UtcDatetime
    live: bool


class QueueScalePublic(Public):
    desired: int = Field(description="Runners the fleet scaler keeps for the queue now")
    pending: int = Field(description="Pilots submitted, waiting for a node")
    running: int = Field(description="Pilots started")
    reason: str = Field(description="Why that many, in words")
    start_s: float | None = Field(description="Median seconds from a pilot's submission to its "
                                  "runner's hello, lately")
    updated_at: UtcDatetime


class QueuePublic(Public):
    queued: int = Field(description="Jobs waiting (database)")
    running: int = Field(description="Jobs claimed by a runner")
    in_broker: int | None = Field(description="Messages in the broker; null if unreachable")
    live_runners: int
    scale: QueueScalePublic | None = Field(default=None, description=(
        "The fleet scaler's last decision (`paragrade admin scale`), while it runs"))


class FleetPublic(Public):
    runners: list[RunnerPublic]
    queues: dict[str, QueuePublic]


class LeaderboardEntryPublic(BaseModel):
    rank: int | None = Field(description="None: unranked (see mark)")
    mark: str | None = Field(default=None, description="Why the entry is unranked: its speedup "
                             "is held for review, or not credited (scoring.credit)")
    tied: bool
    alias: str
    submission_id: int | None = Field(description="Only for your own entry or for instructors")
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    score: float
    tests: float = Field(description="The tests' part of `score` (after the late policy)")
    performance: float = Field(description="The performance part of `score`")
    you: bool



class CourseCellPublic(BaseModel):
    """One task of a student's line on the course board: their entry on its own board."""

    rank: int | None = Field(description="Their rank on the task's own board (None: unranked)")
    tied: bool
    speedup: float | None
    score: float
    mark: str | None = None


class CourseBoardEntryPublic(BaseModel):
    rank: int
    tied: bool = Field(description="Another student has the same total over as many tasks")
    alias: str
    total: float = Field(description="Points over every task (each as its own board counts it)")
    tests: float = Field(description="The tests' part of `total`")
    performance: float = Field(description="The performance part of `total`")
    manual: float = Field(description="The released hand-graded part of `total`")
    solved: int = Field(description="Tasks with a fully correct submission")
    you: bool
    tasks: list[CourseCellPublic | None] = Field(
        description="One per task, in the order of `tasks`; None: not solved yet")


class CourseTaskPublic(BaseModel):
    slug: str
    title: str


class CourseBoardPublic(BaseModel):
    tasks: list[CourseTaskPublic]
    entries: list[CourseBoardEntryPublic]


class SimilarityCreate(Input):
    basis: Literal["latest", "best"] = Field(
        default="latest", description="Each student's latest submission, or the one their "
                                      "leaderboard entry shows")
    threshold: float = Field(default=0.5, gt=0, le=1, description="Report a pair when this "
                             "share of either submission's code is found in the other")


class SimilarPairPublic(SimilarPair):
    """A pair as the runner found it (shares exclude starter and reference code; line ranges
    1-based, inclusive), with whose submissions they are."""

    student_a: str
    student_b: str


class SimilarityRunPublic(BaseModel):
    id: int
    basis: str
    threshold: float
    status: str = Field(description="queued | running | done | error")
    submissions: int
    created_at: UtcDatetime
    finished_at: UtcDatetime | None
    error: str | None = None
    compared: int | None = Field(default=None, description="Pairs that shared code and were "
                                                           "compared in full")
    seconds: float | None = None
    tool: str | None = None
    pairs: list[SimilarPairPublic] | None = Field(
        default=None, description="Most similar first (the run's own page; not in the list)")


class FinalRunCreate(Input):
    rounds: int = Field(default=3, ge=1, le=9, strict=True, description="Rounds: each times every student's "
                        "counted submission once, in a random order of its own, on 1/rounds "
                        "of a grading's timing budget; a student's figure is their median")


class FinalGradePublic(BaseModel):
    email: str
    alias: str | None
    submission_id: int
    speedup: float | None = Field(description="The median of the speedups its rounds earned")
    low: float | None = Field(description="The lowest round's figure; `high` the highest")
    high: float | None
    score: float = Field(description="Final points: the live grading's test points and the "
                         "performance points the median earns, after the late policy")
    live_score: float | None = Field(description="The live grading's points (provisional)")
    turns: int = Field(description="Clean rounds the figure comes from")
    node_busy: bool = Field(default=False, description="The node stayed busy until the run's "
                            "limit: short of clean rounds, the live points are kept")


class FinalTurnPublic(BaseModel):
    email: str
    round: int
    status: str = Field(description="queued | running | done | failed | busy (timed on a busy "
                        "node: settles nothing, timed again in a later round) | expired")
    node: str = Field(description="What the node delivered around the turn's timed windows")
    measured: float | None
    earned: float | None


class FinalRunPublic(BaseModel):
    id: int
    status: str = Field(description="running | done | cancelled")
    automatic: bool = Field(description="Started by the platform once the last deadline passed")
    rounds: int
    turns: int
    done: int
    failed: int
    runner_seconds: float = Field(description="Runner wall seconds the finished turns took")
    busy: int = Field(default=0, description="Turns timed on a busy node (none settles a figure)")
    busy_until: UtcDatetime | None = Field(default=None, description="Busy turns are timed "
                                           "again until then")
    created_at: UtcDatetime
    finished_at: UtcDatetime | None
    grades: list[FinalGradePublic] | None = Field(
        default=None, description="Once done (the run's own page; not in the list)")
    turn_list: list[FinalTurnPublic] | None = Field(
        default=None, description="Every turn with its node's state (the run's own page)")
