"""Grading by a person after the autograder: an assignment's rubric, each student's manual grade
(the items applied, comments on the code's lines), and the regrade requests students send
(services/by_hand/rubric.py, services/by_hand/manual.py, services/by_hand/regrade_requests.py)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import (
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from server.clock import now
from server.db import Base

if TYPE_CHECKING:
    from server.models.submissions import Submission


class RubricItem(Base):
    """One item of an assignment's rubric: points (a deduction is negative) a grader applies to
    a student's work; its text is what the student reads. Editing it changes every grade it is
    applied to (the points are read, not copied)."""

    __tablename__ = "rubric_items"

    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(
        ForeignKey("assignments.id", ondelete="CASCADE"), index=True)
    group: Mapped[str] = mapped_column("group_name", String(100), default="")
    title: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text, default="")
    points: Mapped[float] = mapped_column(Float)
    position: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


class ManualGrade(Base):
    """A student's grade by a person for one assignment: the submission read, who holds it
    (one grader at a time, until `locked_until`), the items applied and the comments."""

    __tablename__ = "manual_grades"
    __table_args__ = (UniqueConstraint("assignment_id", "user_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(
        ForeignKey("assignments.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id", ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(String(16), default="grading")  # | done
    grader_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"),
                                                  default=None)
    """Who last worked on it."""
    locked_by: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"),
                                                  default=None)
    locked_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)

    submission: Mapped[Submission] = relationship()


class AppliedItem(Base):
    """A rubric item applied to a manual grade."""

    __tablename__ = "manual_applied"

    grade_id: Mapped[int] = mapped_column(ForeignKey("manual_grades.id", ondelete="CASCADE"),
                                          primary_key=True)
    item_id: Mapped[int] = mapped_column(ForeignKey("rubric_items.id", ondelete="CASCADE"),
                                         primary_key=True, index=True)


class ManualComment(Base):
    """A grader's comment on a manual grade: on a line of one of the submission's files, or on
    the work as a whole (`file` None)."""

    __tablename__ = "manual_comments"

    id: Mapped[int] = mapped_column(primary_key=True)
    grade_id: Mapped[int] = mapped_column(ForeignKey("manual_grades.id", ondelete="CASCADE"),
                                          index=True)
    author_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    file: Mapped[str | None] = mapped_column(String(300), default=None)
    line: Mapped[int | None] = mapped_column(Integer, default=None)
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)


class RegradeRequest(Base):
    """A student asks for a second look at their grade: one rubric item (applied or not), one
    test, or the performance points of the submission it stands on; the course's staff answer,
    changing the grade or not."""

    __tablename__ = "regrade_requests"

    id: Mapped[int] = mapped_column(primary_key=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignments.id", ondelete="CASCADE"),
                                               index=True)
    submission_id: Mapped[int] = mapped_column(ForeignKey("submissions.id", ondelete="CASCADE"),
                                               index=True)
    """The graded submission the grade stands on."""
    grade_id: Mapped[int | None] = mapped_column(
        ForeignKey("manual_grades.id", ondelete="CASCADE"), index=True, default=None)
    """Its released hand grade, where there was one when the student asked."""
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    item_id: Mapped[int | None] = mapped_column(
        ForeignKey("rubric_items.id", ondelete="SET NULL"), default=None)
    item_title: Mapped[str | None] = mapped_column(String(200), default=None)
    """The item's title as the student saw it (kept when the item is deleted)."""
    test_name: Mapped[str | None] = mapped_column(String(300), default=None)
    performance: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    """About the performance points (the speedup and how it was credited)."""
    reason: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default="open")  # | answered
    answer: Mapped[str | None] = mapped_column(Text, default=None)
    changed: Mapped[bool] = mapped_column(Boolean, default=False)
    """Whether the answer changed the grade (an item applied or taken off)."""
    requeued: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    """Whether the answer queued the submission to be graded again by the autograder."""
    answered_by: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"),
                                                    default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    answered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)
