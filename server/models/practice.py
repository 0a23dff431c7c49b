"""Practice runs: a student's file on the grading hardware, its public tests (and one short
timing) only, never graded (services/intake/practice.py). Kept apart from submissions, so that no
board, grade, quota, statistic, final run, export or LMS post reads one."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import JSON, Boolean, DateTime, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column, relationship

from server.clock import now
from server.db import Base

if TYPE_CHECKING:
    from server.models.accounts import User
    from server.models.assignments import Assignment, AssignmentVersion


class PracticeRun(Base):
    """One practice run: queued -> running -> done (its report) | error (the platform's)."""

    __tablename__ = "practice_runs"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    assignment_id: Mapped[int] = mapped_column(
        ForeignKey("assignments.id", ondelete="CASCADE"), index=True)
    version_id: Mapped[int] = mapped_column(ForeignKey("assignment_versions.id"))
    archive_sha256: Mapped[str] = mapped_column(ForeignKey("artifacts.sha256"))
    filenames: Mapped[list[str]] = mapped_column(JSON)
    timed: Mapped[bool] = mapped_column(Boolean, default=False)
    """Whether it asked for the short timing as well as the public tests."""
    profiled: Mapped[bool] = mapped_column(Boolean, default=False)
    """Whether it asked for a profile of one untimed call."""
    status: Mapped[str] = mapped_column(String(16), default="queued", index=True)
    verdict: Mapped[str | None] = mapped_column(String(32), default=None)
    report: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    error: Mapped[str | None] = mapped_column(String(2000), default=None)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now, index=True)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)

    user: Mapped[User] = relationship()
    assignment: Mapped[Assignment] = relationship()
    version: Mapped[AssignmentVersion] = relationship()
