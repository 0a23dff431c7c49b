"""Notifications' and announcements' inputs and outputs (server/api/notices.py)."""

from __future__ import annotations

from pydantic import Field

from runners.protocol import MAX_ROW_ID
from server.schemas import Input, Paragraphs, Public, UtcDatetime
from server.services.notices.announcements import BODY_MAX, TITLE_MAX


class NotificationPublic(Public):
    id: int
    kind: str
    title: str
    body: str
    link: str = Field(description="A path on this server")
    created_at: UtcDatetime
    updated_at: UtcDatetime
    read_at: UtcDatetime | None


class NotificationsPublic(Public):
    unread: int
    notifications: list[NotificationPublic] = Field(description="The newest 50")


class ReadIn(Input):
    id: int | None = Field(default=None, ge=1, le=MAX_ROW_ID,
                           description="One notification; absent: all of yours")


class ReadPublic(Public):
    marked: int


class KindChoice(Public):
    kind: str
    about: str
    email: str = Field(description="off, now or digest (one e-mail a day)")


class NoticeChoicesPublic(Public):
    email_configured: bool = Field(description="Whether this server sends e-mail at all")
    grade_wait_s: int = Field(description="A grade that landed is told when its grading took "
                              "longer than this (0: always)")
    kinds: list[KindChoice]


class NoticeChoicesIn(Input):
    email: dict[str, str] = Field(default_factory=dict, max_length=32,
                                  description="kind → off, now or digest")
    grade_wait_s: int | None = Field(default=None, ge=0, le=86400)


class AnnouncementIn(Paragraphs):
    MULTILINE = frozenset({"body"})
    title: str = Field(min_length=1, max_length=TITLE_MAX)
    body: str = Field(default="", max_length=BODY_MAX)
    assignment: str | None = Field(default=None, max_length=64,
                                   description="An assignment's slug: about it (else the course)")


class AnnouncementPublic(Public):
    id: int
    title: str
    body: str
    assignment_id: int | None
    created_at: UtcDatetime
