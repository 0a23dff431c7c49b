"""Tables (SQLAlchemy 2.0, typed). Schemas for the API live in server/schemas.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
    true,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from server.db import Base


def now() -> datetime:
    return datetime.now(UTC)


def aware(dt: datetime) -> datetime:
    """A stored time with its zone: SQLite drops it, and every stored time is UTC."""
    return dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(320), unique=True, index=True)
    name: Mapped[str] = mapped_column(String(200))
    password_hash: Mapped[str] = mapped_column(String(255))
    is_instructor: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


class ApiToken(Base):
    """A bearer token for the CLI; only its hash is stored."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(100), default="cli")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)

    user: Mapped[User] = relationship()


class LoginFailure(Base):
    """One failed login: the throttle counts these per (email, address) and per address.

    The email is kept as typed (normalised), whether or not an account has it, so that the
    throttle answers alike for known and unknown emails. Rows older than the window are purged.
    """

    __tablename__ = "login_failures"

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(320), index=True)
    address: Mapped[str] = mapped_column(String(64), index=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now, index=True)
    # Whether the password was checked (False: the throttle refused the attempt first). The
    # account-wide delay counts checked guesses only, so a guesser who keeps knocking while
    # refused does not keep the account's owner waiting.
    checked: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())


class Course(Base):
    __tablename__ = "courses"

    id: Mapped[int] = mapped_column(primary_key=True)
    slug: Mapped[str] = mapped_column(String(64), unique=True)
    title: Mapped[str] = mapped_column(String(200))
    join_code: Mapped[str] = mapped_column(String(32), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


class Enrollment(Base):
    """A user's role in one course."""

    __tablename__ = "enrollments"
    __table_args__ = (UniqueConstraint("user_id", "course_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    course_id: Mapped[int] = mapped_column(ForeignKey("courses.id", ondelete="CASCADE"), index=True)
    role: Mapped[str] = mapped_column(String(16))  # instructor | ta | student
    alias: Mapped[str | None] = mapped_column(String(64), default=None)

    user: Mapped[User] = relationship()
    course: Mapped[Course] = relationship()


class RosterEntry(Base):
    """A row of a course's roster (imported from the LMS's CSV): who should be in the course.

    An email with an account is enrolled at import; one without waits here and is enrolled, with
    this alias, when its owner registers with the course's join code or arrives by LTI."""

    __tablename__ = "roster_entries"
    __table_args__ = (UniqueConstraint("course_id", "email"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    course_id: Mapped[int] = mapped_column(ForeignKey("courses.id", ondelete="CASCADE"), index=True)
    email: Mapped[str] = mapped_column(String(320), index=True)
    name: Mapped[str] = mapped_column(String(200))
    alias: Mapped[str | None] = mapped_column(String(64), default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


class Assignment(Base):
    __tablename__ = "assignments"
    __table_args__ = (UniqueConstraint("course_id", "slug"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    course_id: Mapped[int] = mapped_column(ForeignKey("courses.id", ondelete="CASCADE"), index=True)
    slug: Mapped[str] = mapped_column(String(64))
    title: Mapped[str] = mapped_column(String(200))
    deadline: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    late_policy: Mapped[str] = mapped_column(String(16), default="accept")  # accept|penalty|reject
    late_penalty: Mapped[float] = mapped_column(Float, default=0.0)
    quota_count: Mapped[int] = mapped_column(Integer, default=20)
    quota_window_s: Mapped[int] = mapped_column(Integer, default=3600)
    # The instructor's scoring curve; None keeps the package's (manifest [scoring]).
    speedup_min: Mapped[float | None] = mapped_column(Float, default=None)
    speedup_full: Mapped[float | None] = mapped_column(Float, default=None)
    current_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("assignment_versions.id", use_alter=True, ondelete="SET NULL"), default=None)
    # Bumped in the transaction of every change to the leaderboard (services/leaderboard.py).
    board_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")

    course: Mapped[Course] = relationship()
    current_version: Mapped[AssignmentVersion | None] = relationship(
        foreign_keys=[current_version_id], post_update=True)
    versions: Mapped[list[AssignmentVersion]] = relationship(
        foreign_keys="AssignmentVersion.assignment_id", order_by="AssignmentVersion.id",
        viewonly=True)


class AssignmentVersion(Base):
    """One imported package; changing tests makes a new version."""

    __tablename__ = "assignment_versions"

    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(
        ForeignKey("assignments.id", ondelete="CASCADE"), index=True)
    version: Mapped[str] = mapped_column(String(32))
    manifest: Mapped[dict[str, Any]] = mapped_column(JSON)
    bundle_sha256: Mapped[str] = mapped_column(ForeignKey("artifacts.sha256"))
    status: Mapped[str] = mapped_column(String(16), default="validating")  # |ready|invalid
    checks: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)

    assignment: Mapped[Assignment] = relationship(foreign_keys=[assignment_id])


class Extension(Base):
    """One student's own deadline for one assignment (an instructor granted it)."""

    __tablename__ = "extensions"
    __table_args__ = (UniqueConstraint("assignment_id", "user_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(
        ForeignKey("assignments.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    deadline: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    reason: Mapped[str] = mapped_column(String(500), default="")
    granted_by: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)

    user: Mapped[User] = relationship(foreign_keys=[user_id])


class Artifact(Base):
    """A content-addressed file on disk (bundles, submission archives)."""

    __tablename__ = "artifacts"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


class Submission(Base):
    """A student's upload and where it is in its life: queued -> running -> graded | error."""

    __tablename__ = "submissions"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    assignment_id: Mapped[int] = mapped_column(
        ForeignKey("assignments.id", ondelete="CASCADE"), index=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("assignment_versions.id"))
    archive_sha256: Mapped[str] = mapped_column(ForeignKey("artifacts.sha256"))
    filenames: Mapped[list[str]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default="queued", index=True)
    verdict: Mapped[str | None] = mapped_column(String(32), default=None)
    score: Mapped[float | None] = mapped_column(Float, default=None)
    late: Mapped[bool] = mapped_column(Boolean, default=False)
    counts_for_quota: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now, index=True)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)

    user: Mapped[User] = relationship()
    assignment: Mapped[Assignment] = relationship()
    version: Mapped[AssignmentVersion] = relationship()


class Job(Base):
    """A job as the database holds it (the truth); the broker only carries its id to a runner.

    state: queued → claimed → done, or superseded (a regrade replaced it) or cancelled.
    """

    __tablename__ = "jobs"
    # A queued job's place in its queue (the broker's order) counts only queued jobs.
    __table_args__ = (Index("ix_jobs_queued_order", "queue", "priority", "id",
                            postgresql_where=text("state = 'queued'"),
                            sqlite_where=text("state = 'queued'")),)

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), default="grade")  # grade|validate|similarity
    submission_id: Mapped[int | None] = mapped_column(
        ForeignKey("submissions.id", ondelete="CASCADE"), index=True, default=None)
    version_id: Mapped[int | None] = mapped_column(
        ForeignKey("assignment_versions.id", ondelete="CASCADE"), default=None)
    run_id: Mapped[int | None] = mapped_column(
        ForeignKey("similarity_runs.id", ondelete="CASCADE"), default=None)
    queue: Mapped[str] = mapped_column(String(8), index=True)
    state: Mapped[str] = mapped_column(String(16), default="queued", index=True)
    token_hash: Mapped[str | None] = mapped_column(String(64), default=None)
    # Hash of the claiming runner process's own key: with token_hash, the job answers only the
    # runner that claimed it (another holder of the fleet token cannot report for it).
    runner_key_hash: Mapped[str | None] = mapped_column(String(64), default=None)
    runner: Mapped[str | None] = mapped_column(String(200), default=None)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    claimed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    priority: Mapped[int] = mapped_column(Integer, default=0)  # 0 first … 9 last (regrade-all)
    published_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    time_limit_s: Mapped[int] = mapped_column(Integer, default=1800)


class SimilarityRun(Base):
    """An instructor's similarity check of one assignment: which submissions it compared, on a
    runner, and the pairs it found (the runner's SimilarityResult)."""

    __tablename__ = "similarity_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(
        ForeignKey("assignments.id", ondelete="CASCADE"), index=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("assignment_versions.id",
                                                       ondelete="CASCADE"))
    requested_by: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    basis: Mapped[str] = mapped_column(String(8))  # latest | best
    threshold: Mapped[float] = mapped_column(Float)
    submission_ids: Mapped[list[int]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default="queued")  # |running|done|error
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)

    assignment: Mapped[Assignment] = relationship()
    version: Mapped[AssignmentVersion] = relationship()


class Runner(Base):
    """A runner of the fleet as it last announced itself."""

    __tablename__ = "runners"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    queues: Mapped[list[str]] = mapped_column(JSON)
    capabilities: Mapped[dict[str, Any]] = mapped_column(JSON)
    current_job_id: Mapped[int | None] = mapped_column(Integer, default=None)
    first_seen: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    last_seen: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


class RunnerCredential(Base):
    """A runner's own credential, issued by an operator: the name it serves under and the
    queues it may serve. Only the secret's SHA-256 is stored; a revoked one keeps its hash, so
    that its holder is told it was revoked rather than that it is unknown."""

    __tablename__ = "runner_credentials"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    queues: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)


class GradeReportRow(Base):
    """A stored GradeReport: queryable figures plus the full JSON."""

    __tablename__ = "grade_reports"

    id: Mapped[int] = mapped_column(primary_key=True)
    submission_id: Mapped[int] = mapped_column(
        ForeignKey("submissions.id", ondelete="CASCADE"), unique=True)
    verdict: Mapped[str] = mapped_column(String(32))
    score: Mapped[float] = mapped_column(Float)
    max_score: Mapped[float] = mapped_column(Float)
    speedup_median: Mapped[float | None] = mapped_column(Float, default=None, index=True)
    speedup_ci_low: Mapped[float | None] = mapped_column(Float, default=None)
    speedup_ci_high: Mapped[float | None] = mapped_column(Float, default=None)
    serial_fraction: Mapped[float | None] = mapped_column(Float, default=None)
    # What the credit policy made of the speedup (report.credit): credited | capped | held |
    # refused (None: no speedup, or a report from before the policy).
    credit_status: Mapped[str | None] = mapped_column(String(16), default=None, index=True)
    # The speedup the leaderboard ranks by and the points come from; None while it earns none.
    credited_speedup: Mapped[float | None] = mapped_column(Float, default=None)
    # An instructor's review of a held or refused speedup: granted | refused (None: not yet).
    review: Mapped[str | None] = mapped_column(String(16), default=None)
    # The speedup was measured while the node was short of cores (report.speedup.interference):
    # the board shows it with a mark.
    timing_interfered: Mapped[bool] = mapped_column(Boolean, default=False,
                                                    server_default=false())
    report: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


class BoardEntry(Base):
    """Which submission stands for a student on an assignment's leaderboard (their best passed
    one), kept in the transaction that changes it (services/leaderboard.py `refresh`), so a
    board of 2 000 students reads 2 000 rows however many submissions the assignment holds."""

    __tablename__ = "board_entries"

    assignment_id: Mapped[int] = mapped_column(
        ForeignKey("assignments.id", ondelete="CASCADE"), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"),
                                         primary_key=True)
    submission_id: Mapped[int] = mapped_column(
        ForeignKey("submissions.id", ondelete="CASCADE"), index=True)


class TestResultRow(Base):
    __tablename__ = "test_results"
    __test__ = False

    id: Mapped[int] = mapped_column(primary_key=True)
    report_id: Mapped[int] = mapped_column(
        ForeignKey("grade_reports.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(300))
    outcome: Mapped[str] = mapped_column(String(16))
    verdict: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text)
    hidden: Mapped[bool] = mapped_column(Boolean)
    weight: Mapped[float] = mapped_column(Float)


class ScalingPointRow(Base):
    __tablename__ = "scaling_points"

    id: Mapped[int] = mapped_column(primary_key=True)
    report_id: Mapped[int] = mapped_column(
        ForeignKey("grade_reports.id", ondelete="CASCADE"), index=True)
    workers: Mapped[int] = mapped_column(Integer)
    speedup: Mapped[float] = mapped_column(Float)
    efficiency: Mapped[float] = mapped_column(Float)
    ci_low: Mapped[float] = mapped_column(Float)
    ci_high: Mapped[float] = mapped_column(Float)
    karp_flatt: Mapped[float | None] = mapped_column(Float, default=None)


class AuditLog(Base):
    """What instructors did."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(primary_key=True)
    actor_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(200))
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


class LtiPlatform(Base):
    """An LMS registered as an LTI 1.3 platform for one course: where its OIDC login, token
    endpoint and keys are, the deployments it may launch from, and the tool's own key pair for
    it (the private key signs the tool's requests to the LMS; its public key is in /lti/jwks)."""

    __tablename__ = "lti_platforms"
    __table_args__ = (UniqueConstraint("issuer", "client_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    course_id: Mapped[int] = mapped_column(ForeignKey("courses.id", ondelete="CASCADE"), index=True)
    issuer: Mapped[str] = mapped_column(String(500))
    client_id: Mapped[str] = mapped_column(String(200))
    auth_login_url: Mapped[str] = mapped_column(String(1000))
    auth_token_url: Mapped[str] = mapped_column(String(1000))
    key_set_url: Mapped[str] = mapped_column(String(1000))
    deployment_ids: Mapped[list[str]] = mapped_column(JSON)
    # Whether the server may fetch this LMS's keys, tokens and scores from loopback or private
    # addresses (a test LMS on the same machine); off, as any address an instructor types is
    # fetched on behalf of whoever starts a launch.
    allow_private_network: Mapped[bool] = mapped_column(Boolean, default=False,
                                                        server_default=false())
    tool_private_key: Mapped[str] = mapped_column(Text)
    tool_kid: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)

    course: Mapped[Course] = relationship()


class LtiIdentity(Base):
    """An account's identity on an LMS (its `sub` there): a launch finds the account by it.

    The LMS is its issuer *and* the key set that signs its launches: another registration that
    names the same issuer but signs with other keys (any instructor can register one) is
    another LMS, and reaches none of these accounts."""

    __tablename__ = "lti_identities"
    __table_args__ = (UniqueConstraint("issuer", "key_set_url", "subject"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    issuer: Mapped[str] = mapped_column(String(500))
    key_set_url: Mapped[str] = mapped_column(String(1000))
    subject: Mapped[str] = mapped_column(String(255))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)


class LtiLaunchData(Base):
    """What an LTI login leaves for its launch (state, nonce), with an expiry: the launch
    comes back cross-site, where the browser withholds the session cookie. A nonce is used
    once (its row is deleted by the launch that uses it)."""

    __tablename__ = "lti_launch_data"

    key: Mapped[str] = mapped_column(String(300), primary_key=True)
    value: Mapped[Any] = mapped_column(JSON)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)


class LtiGradePost(Base):
    """A student's grade for one assignment owed to an LMS gradebook (AGS): the latest score,
    posted by the reaper, retried until the LMS takes it; never dropped."""

    __tablename__ = "lti_grade_posts"
    __table_args__ = (UniqueConstraint("platform_id", "user_id", "assignment_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    platform_id: Mapped[int] = mapped_column(ForeignKey("lti_platforms.id", ondelete="CASCADE"),
                                             index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignments.id", ondelete="CASCADE"),
                                               index=True)
    subject: Mapped[str] = mapped_column(String(255))
    lineitem_url: Mapped[str] = mapped_column(String(1000))
    scopes: Mapped[list[str]] = mapped_column(JSON)
    score: Mapped[float | None] = mapped_column(Float, default=None)
    max_score: Mapped[float] = mapped_column(Float, default=100.0)
    state: Mapped[str] = mapped_column(String(16), default="idle", index=True)  # idle|pending|sent
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text, default=None)
    next_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)

    platform: Mapped[LtiPlatform] = relationship()
    user: Mapped[User] = relationship()
    assignment: Mapped[Assignment] = relationship()
