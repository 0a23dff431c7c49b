"""Password hashing (argon2 via pwdlib), password strength, opaque tokens stored as hashes."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import typing as t
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


MIN_PASSWORD_CHARS = 8
MAX_PASSWORD_CHARS = 200
"""Passphrases welcome; the cap only bounds the work one login costs. argon2 (pwdlib's only
hasher here) hashes every character: no 72-byte truncation as bcrypt has."""
MIN_PASSWORD_SCORE = 2
"""zxcvbn's score: 0 and 1 mean fewer than 10^6 guesses (`P@ssw0rd!`, `iloveyou2`,
`abcdefgh1`, the site's name, the user's own email or name): minutes for a guesser spread over
many addresses. 2 means at least 10^6, which the login throttle and argon2 stretch to years."""
ZXCVBN_MAX_CHARS = 72  # zxcvbn refuses longer input (and is slow on it)
SITE_WORDS = ("paragrade", "grader", "autograde", "parallel")


def password_problem(password: str, user_inputs: t.Iterable[str] = ()) -> str | None:
    """Why a password is refused, or None.

    zxcvbn (its list of the 30,000 most common passwords, dictionaries, keyboard patterns,
    repeats, sequences and dates, and the user's own email, name and alias) estimates the
    guesses an attacker needs; below `MIN_PASSWORD_SCORE` the password is refused. A password
    longer than zxcvbn reads is judged by its first 72 characters.
    """
    if not MIN_PASSWORD_CHARS <= len(password) <= MAX_PASSWORD_CHARS:
        return (f"a password has {MIN_PASSWORD_CHARS} to {MAX_PASSWORD_CHARS} characters "
                "(a passphrase of a few words is good)")
    inputs = [*SITE_WORDS]
    for item in user_inputs:
        if item:
            inputs += [item, *item.replace("@", " ").replace(".", " ").split()]
    if zxcvbn(password[:ZXCVBN_MAX_CHARS], user_inputs=inputs)["score"] < MIN_PASSWORD_SCORE:
        return ("this password is too easy to guess (a common one, a simple variant, a "
                "pattern, or your email or name): add a few words, or choose another")
    return None


def new_token() -> str:
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def same_secret(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def join_code() -> str:
    return secrets.token_hex(5)
