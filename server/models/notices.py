"""What users are told: notifications in the page, the e-mails that carry them, each user's
choices, and the staff's announcements (services/notices/)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    Boolean,
    DateTime,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import Mapped, mapped_column

from server.clock import now
from server.db import Base


class Notification(Base):
    """One thing a user is told, in the page (the bell) and, by their choice, by e-mail."""

    __tablename__ = "notifications"
    __table_args__ = (UniqueConstraint("user_id", "key", name="uq_notifications_user_key"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(32))  # services/notices/kinds.py
    key: Mapped[str] = mapped_column(String(200))
    """What it is about, once per user: a later event of the same key while this one is unread
    updates it instead of adding another (a regrade-all's many gradings: one notice)."""
    title: Mapped[str] = mapped_column(String(200))
    body: Mapped[str] = mapped_column(Text, default="")
    link: Mapped[str] = mapped_column(String(500), default="/")
    """A path on the server (the e-mail prefixes the configured public URL)."""
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    read_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None)


class NoticeChoice(Base):
    """A user's choice for one kind of notification: e-mail off, at once, or in a daily digest."""

    __tablename__ = "notice_choices"

    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"),
                                         primary_key=True)
    kind: Mapped[str] = mapped_column(String(32), primary_key=True)
    email: Mapped[str] = mapped_column(String(8))  # off | now | digest


class NoticeSettings(Base):
    """A user's settings that are not per kind."""

    __tablename__ = "notice_settings"

    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"),
                                         primary_key=True)
    grade_wait_s: Mapped[int] = mapped_column(Integer, default=120)
    """A grade that landed is told only when its grading took longer than this (0: always)."""


class MailMessage(Base):
    """An e-mail to send, written in the transaction that made its notification: the outbox a
    sender empties (services/notices/mail.py). Sent once its SMTP server took it."""

    __tablename__ = "mail_messages"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    notification_id: Mapped[int | None] = mapped_column(
        ForeignKey("notifications.id", ondelete="SET NULL"), default=None, index=True)
    digest: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    """Waits for the user's daily digest (one e-mail of all that waited)."""
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
    next_try_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now,
                                                  index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=None,
                                                     index=True)
    last_error: Mapped[str | None] = mapped_column(String(500), default=None)
    refused: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    """The mail server refused the address for good (a bounce, logged): not tried again."""


class Announcement(Base):
    """A message from a course's staff to its students (or one assignment's)."""

    __tablename__ = "announcements"

    id: Mapped[int] = mapped_column(primary_key=True)
    course_id: Mapped[int] = mapped_column(ForeignKey("courses.id", ondelete="CASCADE"),
                                           index=True)
    assignment_id: Mapped[int | None] = mapped_column(
        ForeignKey("assignments.id", ondelete="CASCADE"), default=None)
    author_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    title: Mapped[str] = mapped_column(String(200))
    body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=now)
