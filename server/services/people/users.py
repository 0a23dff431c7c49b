"""Accounts, API tokens and the failed-login throttle.

Answers never tell whether an account exists: registration checks the join code before the
email, a login for an unknown email spends the time of a real password check, and the throttle
counts failures by the email as typed, account or not.

The throttle: failures are counted per (email, client address) and, more loosely, per
address. An address that failed `per_account` times for one email within the window waits (429
with Retry-After), even with the right password; the same account from another address is not
affected, so a stranger cannot lock its owner out. The per-address limit slows one address
trying many accounts, and is loose because a lab behind NAT is one address. Guesses spread over
many addresses meet the account-wide delay: after `account_free` checked guesses at one account
within the window, each further guess waits 1 s, 2 s, 4 s … up to `account_delay_max_s` after the
last one, from any address. It slows a guesser to about a guess a minute without locking the
owner out (they wait at most that long, are told so, and their successful login clears it);
argon2 and the password rules do the rest.
"""

from __future__ import annotations

import contextlib
import ipaddress
import math
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import ColumnElement, delete, or_, select, update
from sqlalchemy.orm import Session, joinedload

from server import db, security
from server.models import ApiToken, Course, LoginFailure, User, aware, now
from server.services.people import courses as course_service
from server.services.records.errors import Conflict, Forbidden, Invalid, NotFound, QuotaExceeded
from server.settings import ServerSettings

DEFAULT_TOKEN_TTL = timedelta(days=30)


def _email(email: str) -> str:
    return email.strip().lower()


def create(*, session: Session, email: str, name: str, password: str,
           is_instructor: bool = False, alias: str | None = None) -> User:
    """A new account (email unique, case-insensitive; a password not easy to guess)."""
    if (problem := security.password_problem(password, (email, name, alias or ""))) is not None:
        raise Invalid(problem)
    email = _email(email)
    hashed = security.hash_password(password)  # first: a taken email answers no sooner
    if session.scalar(select(User).where(User.email == email)):
        raise Conflict(f"an account with {email} already exists")
    user = User(email=email, name=name.strip(), password_hash=hashed, is_instructor=is_instructor)
    session.add(user)
    session.flush()
    return user


def register(*, session: Session, email: str, name: str, password: str, join_code: str,
             alias: str | None) -> User:
    """A student account enrolled in the join code's course.

    The join code is checked before the email: a wrong code gets the same 404 for a known and an
    unknown email (only holders of a course's code learn that an email is taken).
    """
    course = session.scalar(select(Course).where(Course.join_code == join_code.strip()))
    if course is None:
        raise NotFound("no course has this join code")
    # The course's own words are what a classmate guesses first (`Treasure-Hunt1`).
    words = (email, name, alias or "", course.title, course.slug)
    if (problem := security.password_problem(password, words,
                                             join_codes=(course.join_code, join_code))) is not None:
        raise Invalid(problem)
    user = create(session=session, email=email, name=name, password=password, alias=alias)
    course_service.join(session=session, user=user, join_code=join_code, alias=alias)
    return user


@dataclass(frozen=True)
class LoginLimits:
    """The failed-login throttle's window and limits (from the server's settings)."""

    window_s: int = 900
    per_account: int = 5
    per_address: int = 100
    account_free: int = 10
    account_delay_max_s: int = 60

    @classmethod
    def of(cls, settings: ServerSettings) -> LoginLimits:
        return cls(window_s=settings.login_window_s,
                   per_account=settings.login_failures_per_account,
                   per_address=settings.login_failures_per_address,
                   account_free=settings.login_account_free_failures,
                   account_delay_max_s=settings.login_account_delay_max_s)

    def account_delay_s(self, failures: int) -> float:
        """How long after the last checked guess the next one waits, once the account has had
        `failures` of them in the window: none for the first `account_free`, then 1 s, doubling
        with each further guess up to `account_delay_max_s`."""
        if failures < self.account_free:
            return 0.0
        return float(min(self.account_delay_max_s, 2 ** min(failures - self.account_free, 30)))


class TooManyAttempts(QuotaExceeded):
    """Too many failed logins: try again in `retry_after_s` seconds."""

    def __init__(self, retry_after_s: int) -> None:
        minutes = max(1, math.ceil(retry_after_s / 60))
        super().__init__(f"too many failed logins: try again in {minutes} minute"
                         f"{'s' if minutes > 1 else ''}")
        self.retry_after_s = retry_after_s


def _wait_s(session: Session, where: ColumnElement[bool], limit: int, window_s: int) -> float:
    """Seconds until fewer than `limit` failures matching `where` are in the window (0: now)."""
    window = timedelta(seconds=window_s)
    recent = session.scalars(select(LoginFailure.at).where(where, LoginFailure.at > now() - window)
                             .order_by(LoginFailure.at.desc()).limit(limit)).all()
    if len(recent) < limit:
        return 0.0
    return max(0.0, (aware(recent[-1]) + window - now()).total_seconds())


def authenticate(*, session: Session, email: str, password: str, address: str,
                 limits: LoginLimits) -> User:
    """The user with these credentials; TooManyAttempts while throttled, else Forbidden.

    Every attempt is committed as a failure before the throttle counts and the password is
    checked (and forgotten again on success): concurrent guesses all count, none slips in
    between a count and its record, and a refused request's rollback erases nothing.
    """
    email, address = _email(email)[:320], _network(address)
    attempt = LoginFailure(email=email, address=address)
    session.add(attempt)
    session.commit()
    pair = (LoginFailure.email == email) & (LoginFailure.address == address)
    wait = max(_wait_s(session, pair, limits.per_account + 1, limits.window_s),
               _wait_s(session, LoginFailure.address == address, limits.per_address + 1,
                       limits.window_s),
               _account_wait_s(session, email, attempt.id, limits))
    if wait > 0:
        attempt.checked = False
        session.commit()
        raise TooManyAttempts(math.ceil(wait))
    user = session.scalar(select(User).where(User.email == email))
    if user is None:
        security.burn_verify(password)  # as long as a wrong password for a real account
    elif security.verify_password(password, user.password_hash):
        # The owner is in: this address's failures are forgotten, and the account-wide delay
        # starts again (other addresses' failures still count against those addresses).
        session.execute(delete(LoginFailure).where(pair))
        session.execute(update(LoginFailure).where(LoginFailure.email == email)
                        .values(checked=False))
        # Committed now, as the attempt was: a caller that then refuses (an LMS link to an
        # account it cannot take) rolls back its own work, never this (a right password
        # counted as a failure would lock the owner out).
        session.commit()
        return user
    raise Forbidden("wrong email or password")


def _account_wait_s(session: Session, email: str, attempt_id: int, limits: LoginLimits) -> float:
    """Seconds until this account takes its next guess, from any address (0: now)."""
    window = now() - timedelta(seconds=limits.window_s)
    checked = session.scalars(select(LoginFailure.at).where(
        LoginFailure.email == email, LoginFailure.checked, LoginFailure.id != attempt_id,
        LoginFailure.at > window).order_by(LoginFailure.at.desc())).all()
    if not checked:
        return 0.0
    delay = limits.account_delay_s(len(checked))
    return max(0.0, (aware(checked[0]) + timedelta(seconds=delay) - now()).total_seconds())


def _network(address: str) -> str:
    """The throttle's unit: an IPv4 address, or an IPv6 /64 (one host may hold all of it)."""
    with contextlib.suppress(ValueError):
        ip = ipaddress.ip_address(address)
        if ip.version == 6:
            return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return address[:64]


def issue_token(*, session: Session, user: User, name: str = "cli",
                ttl: timedelta = DEFAULT_TOKEN_TTL) -> str:
    """A new bearer token, valid for `ttl`; only its hash is kept."""
    raw = security.new_token()
    session.add(ApiToken(user_id=user.id, token_hash=security.token_hash(raw), name=name,
                         expires_at=now() + ttl))
    session.flush()
    return raw


def user_for_token(*, session: Session, raw: str) -> User | None:
    """The token's user, or None when it is unknown, revoked or expired."""
    token = session.scalar(select(ApiToken).options(joinedload(ApiToken.user))
                           .where(ApiToken.token_hash == security.token_hash(raw)))
    if token is None or token.revoked_at is not None or aware(token.expires_at) <= now():
        return None
    return token.user


def revoke_token(*, session: Session, raw: str) -> None:
    token = session.scalar(select(ApiToken).where(ApiToken.token_hash == security.token_hash(raw)))
    if token is not None:
        token.revoked_at = now()


def purge(*, session: Session, login_window_s: int) -> tuple[int, int]:
    """Delete expired and revoked token rows and failures older than the throttle's window;
    (tokens, failures) deleted."""
    tokens = session.execute(delete(ApiToken).where(or_(ApiToken.revoked_at.is_not(None),
                                                        ApiToken.expires_at <= now())))
    failures = session.execute(delete(LoginFailure).where(
        LoginFailure.at <= now() - timedelta(seconds=login_window_s)))
    return (int(tokens.rowcount), int(failures.rowcount))  # type: ignore[attr-defined]


def hold(*, session: Session, user_id: int) -> bool:
    """Take this user's uploads and account changes one at a time until the transaction ends,
    so that a check and the write it allows are one step (a quota's count and the upload it lets
    in; "no submission yet" and the linking that deletes the account); False if the account is
    gone. A row lock on PostgreSQL; on SQLite the database's one write lock, taken by a write
    that changes nothing (the transaction's reads then see every committed change)."""
    return db.hold(session, User, user_id)
