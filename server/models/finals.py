"""The final run of an assignment: after the deadline, every student's counted submission timed
again, in rounds that interleave the class in a random order (services/grades/finals.py)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

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
    false,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from server.clock import now
from server.db import Base

if TYPE_CHECKING:
    from server.models.assignments import Assignment
    from server.models.submissions import Submission


class FinalRun(Base):
    """One final run: running -> done (every turn timed or failed) | cancelled."""

    __tablename__ = "final_runs"
    # One running final run per assignment, whoever starts it at the same moment (two clicks,
    # the reaper of one server process and an instructor on another).
    __table_args__ = (Index("ix_final_runs_one_running", "assignment_id", unique=True,
                            postgresql_where=text("status = 'running'"),
                            sqlite_where=text("status = 'running'")),)

    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(
        ForeignKey("assignments.id", ondelete="CASCADE"), index=True)
    started_by: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"),
                                                   default=None)
    automatic: Mapped[bool] = mapped_column(Boolean, default=False)
    """Started by the platform once the last deadline (extensions included) had passed."""
    rounds: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), default="running", index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    busy_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    """Turns timed on a busy node are timed again, in later rounds, until then: past it, the
    students still short of clean turns keep their live points, marked (None: no limit)."""

    assignment: Mapped[Assignment] = relationship()


class FinalTurn(Base):
    """One student's submission timed once in one round of a final run (one job)."""

    __tablename__ = "final_turns"

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("final_runs.id", ondelete="CASCADE"),
                                        index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id", ondelete="CASCADE"))
    round: Mapped[int] = mapped_column(Integer)
    reference_speedup: Mapped[float | None] = mapped_column(Float, default=None)
    """The reference's speedup the turn is anchored to, fixed for the whole run at its start
    (services/grades/reference.py pools it): every student's rounds are scaled alike."""
    status: Mapped[str] = mapped_column(String(16), default="queued")
    """queued | running | done | failed | busy (timed on a busy node: it settles nothing, and
    the student gets a turn in a later round) | expired (queued when the busy limit passed)"""
    node: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    """What the node delivered around the turn's timed windows (the report's Interference)."""
    measured: Mapped[float | None] = mapped_column(Float, default=None)
    """The turn's speedup as measured; `earned`: what the credit policy makes of it."""
    earned: Mapped[float | None] = mapped_column(Float, default=None)
    ci_low: Mapped[float | None] = mapped_column(Float, default=None)
    ci_high: Mapped[float | None] = mapped_column(Float, default=None)
    runner: Mapped[str | None] = mapped_column(String(200), default=None)
    timed_s: Mapped[float | None] = mapped_column(Float, default=None)
    """Seconds of the runner's time the turn took (its wall time)."""
    error: Mapped[str | None] = mapped_column(Text, default=None)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)

    submission: Mapped[Submission] = relationship()


class FinalGrade(Base):
    """A student's final figure and points from one finished final run."""

    __tablename__ = "final_grades"

    run_id: Mapped[int] = mapped_column(ForeignKey("final_runs.id", ondelete="CASCADE"),
                                        primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"),
                                         primary_key=True)
    assignment_id: Mapped[int] = mapped_column(
        ForeignKey("assignments.id", ondelete="CASCADE"), index=True)
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id", ondelete="CASCADE"))
    speedup: Mapped[float | None] = mapped_column(Float, default=None)
    """The median over the rounds of the speedup each earned (None: none earned any)."""
    # The rounds' lowest and highest earned speedup: their range, not an interval (a student the
    # run kept live, node_busy: the live grading's 95 % interval). Stored as ci_low/ci_high.
    range_low: Mapped[float | None] = mapped_column("ci_low", Float, default=None)
    range_high: Mapped[float | None] = mapped_column("ci_high", Float, default=None)
    score: Mapped[float] = mapped_column(Float)
    turns: Mapped[int] = mapped_column(Integer)
    """Clean rounds the figure comes from (the others failed on the platform's side, or found
    the node busy)."""
    node_busy: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    """The node stayed busy until the run's limit: the student was short of clean turns, so
    the score is the live grading's, kept and marked."""
