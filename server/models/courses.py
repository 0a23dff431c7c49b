"""Courses and who is in them: enrollments with their roles, the roster imported from an LMS."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import DateTime, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from server.clock import now
from server.db import Base

if TYPE_CHECKING:
    from server.models.accounts import User


class Course(Base):
    __tablename__ = "courses"

    id: Mapped[int] = mapped_column(primary_key=True)
    slug: Mapped[str] = mapped_column(String(64), unique=True)
    title: Mapped[str] = mapped_column(String(200))
    join_code: Mapped[str] = mapped_column(String(32), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    late_days: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Each student's pool of late days for the whole course (0: no late days,
    services/grades/late_days.py)."""
    late_days_per_assignment: Mapped[int | None] = mapped_column(Integer, default=None)
    """The most days one assignment may take from the pool (None: as many as are left)."""


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


class LateDayGrant(Base):
    """Late days the staff gave a student back (or more), with the reason."""

    __tablename__ = "late_day_grants"

    id: Mapped[int] = mapped_column(primary_key=True)
    course_id: Mapped[int] = mapped_column(ForeignKey("courses.id", ondelete="CASCADE"),
                                           index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    days: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str] = mapped_column(Text)
    actor_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
