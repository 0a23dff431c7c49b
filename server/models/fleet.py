"""Jobs as the database holds them, and the runners that take them (as they last announced
themselves, and the credentials they serve under)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Float, ForeignKey, Index, Integer, String, text
from sqlalchemy.orm import Mapped, mapped_column

from server.clock import now
from server.db import Base


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
    kind: Mapped[str] = mapped_column(String(16), default="grade")  # services/fleet/kinds.py
    submission_id: Mapped[int | None] = mapped_column(
        ForeignKey("submissions.id", ondelete="CASCADE"), index=True, default=None)
    version_id: Mapped[int | None] = mapped_column(
        ForeignKey("assignment_versions.id", ondelete="CASCADE"), default=None)
    run_id: Mapped[int | None] = mapped_column(
        ForeignKey("similarity_runs.id", ondelete="CASCADE"), default=None)
    turn_id: Mapped[int | None] = mapped_column(
        ForeignKey("final_turns.id", ondelete="CASCADE"), default=None)
    """A final run's turn (kind "final"): a timing-only job of the turn's submission."""
    practice_id: Mapped[int | None] = mapped_column(
        ForeignKey("practice_runs.id", ondelete="CASCADE"), default=None)
    """A practice run (kind "practice"): the public tests only, never graded."""
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
    # When it became done (recorded, or failed on the platform's side): with claimed_at, how long
    # its last attempt ran, which is what estimates of a job's length start from.
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    time_limit_s: Mapped[int] = mapped_column(Integer, default=1800)


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
    # A pilot's credential (issued by the fleet scaler for one batch job) ends with its job.
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)


class QueueScale(Base):
    """What the fleet scaler last decided for a queue, as /fleet shows it: how many runners the
    queue needs, how many of its pilots wait for a node or run, and why."""

    __tablename__ = "queue_scale"

    queue: Mapped[str] = mapped_column(String(16), primary_key=True)
    desired: Mapped[int] = mapped_column(Integer)
    pending: Mapped[int] = mapped_column(Integer)  # pilots submitted, waiting for a node
    running: Mapped[int] = mapped_column(Integer)  # pilots started
    reason: Mapped[str] = mapped_column(String(500))
    # Seconds from a pilot's submission to its runner's hello, the median of recent ones: what
    # a student whose job waits for a pilot is told to expect.
    start_s: Mapped[float | None] = mapped_column(Float, default=None)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
