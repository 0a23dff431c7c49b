"""Assignments, their versions (one per imported package) and each student's own deadline;
the content-addressed files that packages and submissions are stored as."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    UniqueConstraint,
    false,
    true,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from server.clock import now
from server.db import Base

if TYPE_CHECKING:
    from server.models.accounts import User
    from server.models.courses import Course


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
    # Bumped in the transaction of every change to the leaderboard (services/grades/leaderboard.py).
    board_version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Grading by a person (services/by_hand/manual.py): at most this many points (0: none), added to the
    # autograder's times the weight, seen by students once released; regrade requests a student
    # may have open at once.
    manual_points: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    manual_weight: Mapped[float] = mapped_column(Float, default=1.0, server_default="1")
    manual_released_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True),
                                                                default=None)
    regrade_limit: Mapped[int] = mapped_column(Integer, default=3, server_default="3")
    # Graders see "student N" rather than who wrote the code.
    manual_anonymous: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # When students read a hidden test's whole message (services/grades/visibility.py); None: as the
    # package says ([feedback] hidden_tests).
    hidden_tests_shown: Mapped[str | None] = mapped_column(String(16), default=None)
    # Practice runs (services/intake/practice.py): each student's runs per hour and per day
    # (None: the defaults), whether they may ask for the short timing and for a profile, and a
    # pause (before a deadline, say) until when none is taken.
    practice_per_hour: Mapped[int | None] = mapped_column(Integer, default=None)
    practice_per_day: Mapped[int | None] = mapped_column(Integer, default=None)
    practice_timing: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    practice_profiles: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    practice_paused_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True),
                                                                   default=None)
    # One profiled call after each graded grading's timing (runners/grading/practice.py
    # `profiled_call`): off unless the instructor opts in, as it costs runner time.
    graded_profiles: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    # Team work (services/people/teams.py): teams of team_min to team_max students (team_max
    # None: individual work), formed by the students with a join code where teams_by_students,
    # else by the staff; membership frozen from team_lock_at.
    team_max: Mapped[int | None] = mapped_column(Integer, default=None)
    team_min: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    teams_by_students: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    team_lock_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)

    course: Mapped[Course] = relationship()
    current_version: Mapped[AssignmentVersion | None] = relationship(
        foreign_keys=[current_version_id], post_update=True)
    versions: Mapped[list[AssignmentVersion]] = relationship(
        foreign_keys="AssignmentVersion.assignment_id", order_by="AssignmentVersion.id",
        viewonly=True)

    def late_policy_words(self) -> str:
        """The late policy in full, as every page says it."""
        if self.late_policy == "reject":
            return "late submissions are not accepted"
        if self.late_policy == "penalty" and self.late_penalty:
            return f"late submissions lose {self.late_penalty * 100:g} % of their points"
        return "late submissions are accepted without penalty"

    def after_late_policy(self, points: float, late: bool) -> float:
        """`points` of a submission (`late`: handed in after its deadline) after this
        assignment's late policy: the one rule for every page, board and export."""
        if late and self.late_policy == "penalty":
            points *= 1 - self.late_penalty
        return round(points, 2)


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


class ReferenceFigure(Base):
    """The reference's speedup over the serial baseline as one grading of a version measured it
    beside a student's code (the anchor's `reference_measured`): the pool that the figure every
    grading is anchored to comes from (services/grades/reference.py)."""

    __tablename__ = "reference_figures"

    id: Mapped[int] = mapped_column(primary_key=True)
    version_id: Mapped[int] = mapped_column(
        ForeignKey("assignment_versions.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    """The student whose grading measured it (each student is one vote)."""
    figure: Mapped[float] = mapped_column(Float)
    final: Mapped[bool] = mapped_column(Boolean, default=False)
    """Measured in a final run's turn rather than a live grading."""
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


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
