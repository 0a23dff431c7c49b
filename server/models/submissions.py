"""Submissions and what is made of them: the stored grade report with its tests and scaling
points, the leaderboard's entries, similarity runs over them."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Integer, String, Text, false
from sqlalchemy.orm import Mapped, mapped_column, relationship

from server.clock import now
from server.db import Base

if TYPE_CHECKING:
    from server.models.accounts import User
    from server.models.assignments import Assignment, AssignmentVersion
    from server.models.teams import Team


class Submission(Base):
    """A student's upload and where it is in its life: queued -> running -> graded | error."""

    __tablename__ = "submissions"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    """Who uploaded it."""
    assignment_id: Mapped[int] = mapped_column(
        ForeignKey("assignments.id", ondelete="CASCADE"), index=True)
    team_id: Mapped[int | None] = mapped_column(ForeignKey("teams.id"), default=None, index=True)
    """The team it was handed in for (models/teams.py), shared by its members of that moment;
    None: the uploader's own."""
    version_id: Mapped[int] = mapped_column(ForeignKey("assignment_versions.id"))
    archive_sha256: Mapped[str] = mapped_column(ForeignKey("artifacts.sha256"))
    filenames: Mapped[list[str]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default="queued", index=True)
    verdict: Mapped[str | None] = mapped_column(String(32), default=None)
    score: Mapped[float | None] = mapped_column(Float, default=None)
    late: Mapped[bool] = mapped_column(Boolean, default=False)
    late_days: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Late days that cover it (it is then not late): its lateness in whole days, counted
    against its students' own deadline (services/grades/late_days.py)."""
    told_score: Mapped[float | None] = mapped_column(Float, default=None)
    """The points its students were last told (services/notices/follow.py): a grade that moves
    from them is news."""
    counts_for_quota: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now, index=True)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    auto_retimes: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Gradings the platform started again by itself because the node was short of cores."""

    user: Mapped[User] = relationship()
    assignment: Mapped[Assignment] = relationship()
    version: Mapped[AssignmentVersion] = relationship()
    team: Mapped[Team | None] = relationship()


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


class BoardEntry(Base):
    """Which submission stands for a student on an assignment's leaderboard (their best passed
    one), kept in the transaction that changes it (services/grades/leaderboard.py `refresh`), so a
    board of 2 000 students reads 2 000 rows however many submissions the assignment holds."""

    __tablename__ = "board_entries"

    assignment_id: Mapped[int] = mapped_column(
        ForeignKey("assignments.id", ondelete="CASCADE"), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"),
                                         primary_key=True)
    submission_id: Mapped[int] = mapped_column(
        ForeignKey("submissions.id", ondelete="CASCADE"), index=True)


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
