"""The e-mail outbox's sender: each waiting message goes to the configured SMTP server (Python's
smtplib: STARTTLS, TLS or plain, with a login where one is set), once.

A message is a row written with its notification (services/notices/notify.py), so nothing is
sent that was not committed and nothing committed is lost: a server that dies before sending
sends at its next start; a mail server that is down or answers with a temporary error is tried
again later (`RETRY_S`, doubling up to `RETRY_MAX_S`), for as long as it takes. A message is
marked sent in its own transaction right after the mail server accepted it; an address the
server refuses for good (a bounce) is logged and not tried again. The words are the
notification's latest (a message that waited sends what is true when it leaves); every link is
the configured public URL's; nothing secret is in a message. Digests: a user's messages that
wait for their daily digest leave together, once the oldest has waited `DIGEST_S`."""

from __future__ import annotations

import logging
import smtplib
import ssl
import threading
from collections.abc import Callable
from datetime import timedelta
from email.message import EmailMessage
from email.utils import make_msgid
from urllib.parse import urlsplit

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from server.models import MailMessage, Notification, User, now
from server.settings import ServerSettings

log = logging.getLogger("paragrade.mail")

RETRY_S = 30
RETRY_MAX_S = 3600
DIGEST_S = 24 * 3600
BATCH = 200
"""Messages one pass sends at most (the rest wait for the next pass, seconds later)."""
UNDELIVERABLE = ".invalid"
"""Addresses under the reserved top-level domain (an LMS's own accounts): never sent to."""


def sender_of(settings: ServerSettings) -> str:
    return settings.mail_from or f"paragrade@{urlsplit(settings.public_url).hostname or 'localhost'}"


def connect(settings: ServerSettings) -> smtplib.SMTP:
    """A connection to the configured mail server, secured and logged in as configured."""
    assert settings.smtp_host is not None
    timeout = settings.smtp_timeout_s
    if settings.smtp_security == "tls":
        smtp: smtplib.SMTP = smtplib.SMTP_SSL(settings.smtp_host, settings.smtp_port,
                                              timeout=timeout,
                                              context=ssl.create_default_context())
    else:
        smtp = smtplib.SMTP(settings.smtp_host, settings.smtp_port, timeout=timeout)
        if settings.smtp_security == "starttls":
            smtp.starttls(context=ssl.create_default_context())
    if settings.smtp_username:
        smtp.login(settings.smtp_username, settings.smtp_password or "")
    return smtp


def _compose(settings: ServerSettings, user: User, notes: list[Notification]) -> EmailMessage:
    base = settings.public_url.rstrip("/")
    msg = EmailMessage()
    msg["From"], msg["To"] = sender_of(settings), user.email
    msg["Subject"] = (notes[0].title if len(notes) == 1
                      else f"paragrade: {len(notes)} notifications")
    msg["Message-ID"] = make_msgid(domain=urlsplit(base).hostname or "localhost")
    parts = [f"{n.title}\n{n.body}\n{base}{n.link}".strip() for n in notes]
    msg.set_content("\n\n".join(parts) + f"\n\n-- \nWhat you are told by e-mail: "
                    f"{base}/notifications\n")
    return msg


def _due(session: Session) -> list[list[MailMessage]]:
    """The messages to send now, in groups of one e-mail: each one that is due alone, and each
    user's digest whose oldest message has waited long enough."""
    clock = now()
    waiting = (MailMessage.sent_at.is_(None), MailMessage.refused.is_(False),
               MailMessage.next_try_at <= clock)
    single = [[m] for m in session.scalars(select(MailMessage).where(
        *waiting, MailMessage.digest.is_(False)).order_by(MailMessage.id).limit(BATCH))]
    ripe = select(MailMessage.user_id).where(*waiting, MailMessage.digest.is_(True)).group_by(
        MailMessage.user_id).having(func.min(MailMessage.created_at) <= clock - timedelta(
            seconds=DIGEST_S))
    digests: dict[int, list[MailMessage]] = {}
    for m in session.scalars(select(MailMessage).where(
            *waiting, MailMessage.digest.is_(True), MailMessage.user_id.in_(ripe))
            .order_by(MailMessage.id).limit(BATCH)):
        digests.setdefault(m.user_id, []).append(m)
    return single + list(digests.values())


def _later(group: list[MailMessage], error: str) -> None:
    for m in group:
        m.attempts += 1
        m.last_error = error[:500]
        m.next_try_at = now() + timedelta(seconds=min(RETRY_S * 2 ** (m.attempts - 1),
                                                      RETRY_MAX_S))


def send_due(sessions: sessionmaker[Session], settings: ServerSettings,
             smtp_factory: Callable[[ServerSettings], smtplib.SMTP] = connect) -> int:
    """Send what is due (nothing where no mail server is configured); how many e-mails left."""
    if settings.smtp_host is None:
        return 0
    with sessions() as session:
        groups = _due(session)
        if not groups:
            return 0
        try:
            smtp = smtp_factory(settings)
        except (OSError, smtplib.SMTPException) as exc:  # down: every message waits
            log.warning("the mail server %s:%s cannot be reached (%s): %d e-mails wait",
                        settings.smtp_host, settings.smtp_port, exc, len(groups))
            for group in groups:
                _later(group, f"the mail server could not be reached: {exc}")
            session.commit()
            return 0
        sent = 0
        with smtp:
            for group in groups:
                sent += _send(session, settings, smtp, group)
        return sent


def _send(session: Session, settings: ServerSettings, smtp: smtplib.SMTP,
          group: list[MailMessage]) -> int:
    user = session.get(User, group[0].user_id)
    notes = [n for m in group if m.notification_id is not None
             and (n := session.get(Notification, m.notification_id)) is not None]
    if user is None or not notes or user.email.endswith(UNDELIVERABLE):
        for m in group:  # nothing left to say, or no one to say it to
            m.sent_at, m.last_error = now(), "not sent: no notification or no address"
        session.commit()
        return 0
    try:
        smtp.send_message(_compose(settings, user, notes))
    except smtplib.SMTPRecipientsRefused as exc:
        log.warning("the mail server refused %s for good (a bounce): %s", user.email,
                    exc.recipients)
        for m in group:
            m.refused, m.last_error = True, f"refused: {exc.recipients}"[:500]
        session.commit()
        return 0
    except (OSError, smtplib.SMTPException) as exc:
        log.warning("an e-mail to %s waits: %s", user.email, exc)
        _later(group, str(exc))
        session.commit()
        return 0
    for m in group:
        m.sent_at, m.attempts = now(), m.attempts + 1
    session.commit()  # at once: the mail server has it
    return 1


def start(sessions: sessionmaker[Session], settings: ServerSettings,
          stop: threading.Event) -> threading.Thread | None:
    """The sender's thread (none where no mail server is configured)."""
    if settings.smtp_host is None:
        return None

    def loop() -> None:
        while not stop.wait(settings.mail_poll_s):
            try:
                while send_due(sessions, settings) >= BATCH:
                    pass
            except Exception:  # the loop outlives one bad pass (the database busy, a bug)
                log.exception("sending e-mail failed; trying again")

    thread = threading.Thread(target=loop, name="mail", daemon=True)
    thread.start()
    return thread
