"""Password hashing (argon2 via pwdlib), password strength, opaque tokens stored as hashes."""

from __future__ import annotations

import hashlib
import hmac
import re
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


GUESSED_FIRST = ("spring", "summer", "autumn", "fall", "winter", "welcome", "password",
                 "passwort", "semester", "january", "february", "march", "april", "may", "june",
                 "july", "august", "september", "october", "november", "december", "jan", "feb",
                 "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",
                 "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday",
                 "student", "students", "qwerty", "qwertz", "azerty", "asdf", "zxcv", "letmein")
"""Words a guesser tries with a year and a `!` before anything else (`Summer2026!`)."""
LEET = (str.maketrans("034@5$71", "oeaasstl"), str.maketrans("034@5$71", "oeaassti"))
"""Digits and signs read as the letters they stand for (`P@tSm1th`, `Wint3r`, `$mith`): a
`1` both ways, as an l and as an i."""
SEPARATORS = re.compile(r"(?<=[a-z])[.\-_ ]+(?=[a-z])")
"""Dots, dashes, underscores and spaces between letters (`P.a.t.S.m.i.t.h`)."""
MIN_OWN_LETTERS = 4
"""Letters a password must keep once the words a guesser tries first are taken out."""
YEAR = re.compile(r"(19|20)\d\d")


def _pieces(item: str) -> list[str]:
    """An email, a name or a course title as the words a guesser tries: each part, and the
    parts run together (`Pat Smith`: pat, smith, patsmith, smithpat, psmith)."""
    parts = [p for p in re.split(r"[^0-9a-z]+", item.lower()) if p]
    out = list(parts)
    if len(parts) >= 2:
        out += ["".join(parts), "".join(reversed(parts)), parts[0][0] + parts[-1]]
    return out


def _remainder(password: str, words: t.Iterable[str]) -> str:
    """The password without the words a guesser tries first (longest first), years, and the
    digits and punctuation around them: what is left is what the guesser must find. It is read
    as a guesser's rules read it: years first, then digits and signs as letters, separators
    between letters dropped, forwards and backwards; the shortest of those readings counts."""
    ordered = sorted({w for w in words if len(w) >= 2}, key=len, reverse=True)
    plain = YEAR.sub(" ", password.lower())
    readings = []
    for table in LEET:
        joined = SEPARATORS.sub("", plain.translate(table))
        readings += [joined, joined[::-1]]
    rests = []
    for rest in readings:
        for word in ordered:
            rest = rest.replace(word, " ")
        rests.append(re.sub(r"[^a-z]+", " ", rest).strip())
    return min(rests, key=lambda r: len(r.replace(" ", "")))


def password_problem(password: str, user_inputs: t.Iterable[str] = (),
                     join_codes: t.Iterable[str] = ()) -> str | None:
    """Why a password is refused, or None.

    zxcvbn (its list of the 30,000 most common passwords, dictionaries, keyboard patterns,
    repeats, sequences and dates, and the user's own email, name, alias and course) estimates the
    guesses an attacker needs; below `MIN_PASSWORD_SCORE` the password is refused. zxcvbn scores
    `PatSmith2026!` for Pat Smith well (it does not try names run together with a year), so the
    password is read a second time without the words a guesser tries first (the user's own, the
    course's, seasons, months, days, `welcome`, `student`, keyboard rows), years, digits and
    punctuation, read with digits and signs as letters (`P@tSm1th`), separators dropped
    (`P.a.t.S.m.i.t.h`) and backwards too: at least `MIN_OWN_LETTERS` letters must be left; no
    course's join code (`join_codes`) may be in it. A
    password longer than zxcvbn reads is judged by its first 72 characters.
    """
    if not MIN_PASSWORD_CHARS <= len(password) <= MAX_PASSWORD_CHARS:
        return (f"a password has {MIN_PASSWORD_CHARS} to {MAX_PASSWORD_CHARS} characters "
                "(a passphrase of a few words is good)")
    if any(code and code.lower() in password.lower() for code in join_codes):
        return ("a course's join code is never a password: everyone in the course has it; "
                "choose a few words of your own")
    inputs = [*SITE_WORDS]
    words: list[str] = [*SITE_WORDS, *GUESSED_FIRST]
    for item in user_inputs:
        if item:
            inputs += [item, *item.replace("@", " ").replace(".", " ").split()]
            words += _pieces(item)
    head = password[:ZXCVBN_MAX_CHARS]
    rest = _remainder(head, words)
    if zxcvbn(head, user_inputs=inputs)["score"] < MIN_PASSWORD_SCORE or \
            len(rest.replace(" ", "")) < MIN_OWN_LETTERS:
        return ("this password is too easy to guess (a common one, a simple variant, a "
                "pattern, a season or a year, or your email, name or course): add a few "
                "words of your own, or choose another")
    return None


def new_token() -> str:
    return secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def same_secret(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def join_code() -> str:
    return secrets.token_hex(5)
