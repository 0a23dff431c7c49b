"""Password hashing (argon2 via pwdlib), password strength, opaque tokens stored as hashes."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from functools import cache

from pwdlib import PasswordHash
from zxcvbn import zxcvbn

_hasher = PasswordHash.recommended()


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password: str, hashed: str) -> bool:
    """False for an account with no password (one that logs in from its LMS: "!…")."""
    if hashed.startswith("!"):
        _hasher.verify(password, _dummy_hash())  # the time a real check takes
        return False
    return _hasher.verify(password, hashed)


@cache
def _dummy_hash() -> str:
    return _hasher.hash(secrets.token_urlsafe(16))


def burn_verify(password: str) -> None:
    """Spend the time of a real verification, for an email no account has: a login then takes
    as long whether or not the account exists."""
    _hasher.verify(password, _dummy_hash())


def password_problem(password: str) -> str | None:
    """Why a password is refused, or None.

    zxcvbn (its list of the 30,000 most common passwords, dictionaries, keyboard patterns,
    repeats, sequences and dates) estimates the guesses an attacker needs; score 0 means fewer
    than 10^3: `password`, `12345678`, `aaaaaaaa`, `Password1`. Length is checked by the schemas.
    """
    if zxcvbn(password[:100])["score"] == 0:  # zxcvbn is slow on very long inputs
        return ("this password is among the most common ones (or a simple variant, repeat or "
                "sequence): choose another")
    return None


def new_token() -> str:
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def same_secret(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def join_code() -> str:
    return secrets.token_hex(5)
