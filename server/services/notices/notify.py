"""Notifications: one per user and `key` (a later event about the same thing while it is unread
updates it rather than adding another: a regrade-all of many gradings is one notice), the e-mail
each one queues by the user's choice for its kind, the bell's list, marking read, and choices.

Each notification is written in the caller's transaction, beside the change it tells of, and so
is its e-mail (the outbox, services/notices/mail.py): a grade and its message commit together or
not at all, and a server that dies after the commit sends the message when it is back."""

from __future__ import annotations

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from server.models import (
    MailMessage,
    NoticeChoice,
    NoticeSettings,
    Notification,
    User,
    now,
)
from server.services.notices.kinds import EMAILS, GRADE_WAIT_S, KINDS
from server.services.records.errors import Invalid, NotFound

LIST_MAX = 50
TITLE_MAX = 200


def notify(*, session: Session, user_id: int, kind: str, key: str, title: str, body: str = "",
           link: str = "/") -> Notification:
    """Tell `user_id` (in the page, and by e-mail as they chose for `kind`)."""
    assert kind in KINDS, kind
    n = session.scalar(select(Notification).where(Notification.user_id == user_id,
                                                  Notification.key == key))
    if n is None:
        n = Notification(user_id=user_id, kind=kind, key=key, title=title[:TITLE_MAX], body=body,
                         link=link)
        session.add(n)
    else:  # news again: the latest words, unread
        n.kind, n.title, n.body, n.link = kind, title[:TITLE_MAX], body, link
        n.updated_at, n.read_at = now(), None
    session.flush()
    mode = email_of(session=session, user_id=user_id, kind=kind)
    waiting = session.scalar(select(MailMessage.id).where(
        MailMessage.notification_id == n.id, MailMessage.sent_at.is_(None),
        MailMessage.refused.is_(False)).limit(1))
    if mode != "off" and waiting is None:  # a waiting one sends the latest words anyway
        session.add(MailMessage(user_id=user_id, notification_id=n.id, digest=mode == "digest"))
        session.flush()
    return n


def exists(*, session: Session, user_id: int, key: str) -> bool:
    """Whether the user was ever told of `key` (read or not)."""
    return session.scalar(select(Notification.id).where(Notification.user_id == user_id,
                                                        Notification.key == key)) is not None


def email_of(*, session: Session, user_id: int, kind: str) -> str:
    """The user's e-mail choice for `kind` (its default where they made none)."""
    chosen = session.get(NoticeChoice, (user_id, kind))
    return chosen.email if chosen is not None else KINDS[kind][1]


def grade_wait_s(*, session: Session, user_id: int) -> int:
    settings = session.get(NoticeSettings, user_id)
    return settings.grade_wait_s if settings is not None else GRADE_WAIT_S


def choose(*, session: Session, user: User, emails: dict[str, str],
           grade_wait: int | None = None) -> None:
    """Set the user's e-mail choice per kind (`off`, `now`, `digest`) and the grade wait."""
    for kind, mode in emails.items():
        if kind not in KINDS:
            raise Invalid(f"no kind of notification {kind!r} (the kinds are "
                          f"{', '.join(KINDS)})")
        if mode not in EMAILS:
            raise Invalid(f"e-mail for {kind} is one of {', '.join(EMAILS)}")
        chosen = session.get(NoticeChoice, (user.id, kind))
        if chosen is None:
            session.add(NoticeChoice(user_id=user.id, kind=kind, email=mode))
        else:
            chosen.email = mode
    if grade_wait is not None:
        if not 0 <= grade_wait <= 86400:
            raise Invalid("the grade wait is 0 (always) to 86400 seconds")
        settings = session.get(NoticeSettings, user.id)
        if settings is None:
            session.add(NoticeSettings(user_id=user.id, grade_wait_s=grade_wait))
        else:
            settings.grade_wait_s = grade_wait
    session.flush()


def latest(*, session: Session, user: User, unread_only: bool = False) -> list[Notification]:
    """The user's notifications, the newest first."""
    q = select(Notification).where(Notification.user_id == user.id)
    if unread_only:
        q = q.where(Notification.read_at.is_(None))
    return list(session.scalars(q.order_by(Notification.updated_at.desc(), Notification.id.desc())
                                .limit(LIST_MAX)))


def unread(*, session: Session, user: User) -> int:
    return session.scalar(select(func.count()).select_from(Notification).where(
        Notification.user_id == user.id, Notification.read_at.is_(None))) or 0


def mark_read(*, session: Session, user: User, notification_id: int | None = None) -> int:
    """Mark one of the user's notifications read (None: all of them); how many it marked."""
    q = update(Notification).where(Notification.user_id == user.id,
                                   Notification.read_at.is_(None))
    if notification_id is not None:
        if session.scalar(select(Notification.id).where(
                Notification.id == notification_id, Notification.user_id == user.id)) is None:
            raise NotFound(f"no notification {notification_id} of yours")
        q = q.where(Notification.id == notification_id)
    done = session.execute(q.values(read_at=now()).execution_options(synchronize_session=False))
    return int(done.rowcount)  # type: ignore[attr-defined]
