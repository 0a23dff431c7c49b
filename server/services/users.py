"""Accounts and API tokens."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from server import security
from server.models import ApiToken, User, now
from server.services.errors import Conflict, Forbidden


def create(*, session: Session, email: str, name: str, password: str,
           is_instructor: bool = False) -> User:
    """A new account (email unique, case-insensitive)."""
    email = email.strip().lower()
    if session.scalar(select(User).where(User.email == email)):
        raise Conflict(f"an account with {email} already exists")
    user = User(email=email, name=name.strip(), password_hash=security.hash_password(password),
                is_instructor=is_instructor)
    session.add(user)
    session.flush()
    return user


def authenticate(*, session: Session, email: str, password: str) -> User:
    """The user with these credentials, or Forbidden."""
    user = session.scalar(select(User).where(User.email == email.strip().lower()))
    if user is None or not security.verify_password(password, user.password_hash):
        raise Forbidden("wrong email or password")
    return user


def issue_token(*, session: Session, user: User, name: str = "cli") -> str:
    """A new bearer token; only its hash is kept."""
    raw = security.new_token()
    session.add(ApiToken(user_id=user.id, token_hash=security.token_hash(raw), name=name))
    session.flush()
    return raw


def user_for_token(*, session: Session, raw: str) -> User | None:
    token = session.scalar(select(ApiToken).where(ApiToken.token_hash == security.token_hash(raw)))
    if token is None or token.revoked_at is not None:
        return None
    return token.user


def revoke_token(*, session: Session, raw: str) -> None:
    token = session.scalar(select(ApiToken).where(ApiToken.token_hash == security.token_hash(raw)))
    if token is not None:
        token.revoked_at = now()
