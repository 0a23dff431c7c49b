"""Accounts, aliases and the roster against a guesser and an impersonator.

Each test failed on the code before: a password over 72 characters was a 500; the email, the
name, `P@ssw0rd!` and `paragrade` were accepted as passwords; a roster with a 3 MiB cell was a
500; a second `alice` (or a Cyrillic `аlice`) registered and showed on the board as "alice"; a
locked-out guesser got past the throttle by naming a new X-Forwarded-For address each time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import hypothesis
import pytest
from fastapi.testclient import TestClient
from hypothesis import strategies as st
from sqlalchemy import Engine

from server.security import MAX_PASSWORD_CHARS
from tests.server.conftest import World, login
from tests.server.live import answers, free_port, wait_until
from tests.server.test_pages import csrf

PASSPHRASE = "the quick parallel fox jumps over the lazy serial dog " * 2  # 108 characters


def _register(world: World, **changes: str) -> httpx.Response:
    body = {"email": "cy@uni.edu", "name": "Cy Young", "password": "violet-anchor-7391",
            "join_code": world.join_code, **changes}
    return world.client.post("/api/auth/register", json=body)


# --- passwords ---------------------------------------------------------------------------------


def test_a_long_passphrase_registers_and_logs_in(world: World) -> None:
    r = _register(world, password=PASSPHRASE)
    assert r.status_code == 201, r.text
    login(world.client, "cy@uni.edu", PASSPHRASE)
    # Hashed whole: the same first 72 characters with another ending is another password.
    r = world.client.post("/api/auth/token", json={"email": "cy@uni.edu",
                                                   "password": PASSPHRASE[:72] + "x" * 36})
    assert r.status_code == 403
    # The register page too (it was a 500 there as well).
    b = TestClient(world.client.app, follow_redirects=False)
    page = b.get(f"/register?code={world.join_code}")
    r = b.post("/register", data={"email": "dee@uni.edu", "name": "Dee", "password": PASSPHRASE,
                                  "join_code": world.join_code, "alias": "",
                                  "csrf_token": csrf(page.text)})
    assert r.status_code == 303, r.text
    # Beyond the documented maximum: a clear refusal, not a crash.
    r = _register(world, email="eve@uni.edu", password="x7#kQ9!m" * 30)
    assert r.status_code == 422 and str(MAX_PASSWORD_CHARS) in r.text, r.text


@pytest.mark.parametrize("password", ["cy@uni.edu", "Cy Young", "cyyoung1", "P@ssw0rd!",
                                      "paragrade", "iloveyou2", "abcdefgh1", "cy-the-alias"])
def test_weak_passwords_are_refused(world: World, password: str) -> None:
    r = _register(world, password=password, alias="cy-the-alias")
    assert r.status_code == 422 and "easy to guess" in r.json()["detail"], r.text


@pytest.mark.parametrize(("password", "email", "name"), [
    ("PatSmith2026!", "pat@uni.edu", "Pat Smith"),
    ("MaxMustermann1999", "max@uni.edu", "Max Mustermann"),
    ("carolsmith1999", "carol@uni.edu", "Carol Smith"),
    ("Carol.Smith.2026", "carol@uni.edu", "Carol Smith"),
    ("Smith2026!", "cs@uni.edu", "Carol Smith"),
    ("Lee.uni.edu", "lee@uni.edu", "Lee"),
    ("uni.edu.csmith", "csmith@uni.edu", "Carol Smith"),
    ("Summer2026!", "cy@uni.edu", "Cy Young"),
    ("Welcome2026!", "cy@uni.edu", "Cy Young"),
    ("Treasure-Hunt1", "cy@uni.edu", "Cy Young"),  # the course's own title ("Treasure hunt")
])
def test_what_a_guesser_tries_first_is_refused(world: World, password: str, email: str,
                                               name: str) -> None:
    """Each was accepted (201) before: a name or email run together with a year, a season or
    `welcome` with a year and a `!`, the course's own words."""
    r = _register(world, email=email, name=name, password=password)
    assert r.status_code == 422 and "easy to guess" in r.json()["detail"], r.text


@pytest.mark.parametrize("password", [
    "P@tSm1th2026", "Sm1th-P@t-26", "p4t.sm1th26!", "P4tSm1th!", "$mith2026!!", "htimStaP2026",
    "P.a.t.S.m.i.t.h.26", "Summ3r2026!", "Wint3r2026!", "5ummer2026!", "Tr3asureHunt26",
    "Treasur3Hunt!", "Pyth0nParallel1", "Sept2026!!Pat", "Qwerty2026!", "Monday2026!",
    "student2026!", "Student123!"])
def test_a_guessers_rules_are_applied_before_the_checks(world: World, password: str) -> None:
    """Each passed (201) for Pat Smith in "Treasure hunt: parallel Python" (the third red-team
    pass): leetspeak, reversal and separators, short months, days, `student`, keyboard rows."""
    r = world.post(world.prof, "/api/courses", json={"slug": "tp",
                                                      "title": "Treasure hunt: parallel Python"})
    assert r.status_code == 201, r.text
    r = _register(world, email="pat.smith@uni.edu", name="Pat Smith", password=password,
                  join_code=r.json()["join_code"])
    assert r.status_code == 422 and "easy to guess" in r.json()["detail"], r.text


def test_a_courses_join_code_is_never_a_password(world: World) -> None:
    for password in (world.join_code, f"my {world.join_code} pass", world.join_code.upper()):
        r = _register(world, password=password)
        assert r.status_code == 422 and "join code" in r.json()["detail"], (password, r.text)


WORDS = ("orchid", "lantern", "gravel", "copper", "meadow", "violin", "harbor", "quartz",
         "thistle", "saddle", "pepper", "glacier", "walnut", "falcon", "ribbon", "canyon",
         "marble", "tundra", "biscuit", "lagoon", "fiddle", "cobalt", "juniper", "anvil")


@hypothesis.settings(max_examples=20, deadline=None,
                     suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture])
@hypothesis.given(words=st.lists(st.sampled_from(WORDS), min_size=4, max_size=4, unique=True),
                  sep=st.sampled_from([" ", "-", "."]))
def test_a_random_four_word_passphrase_passes(world: World, words: list[str], sep: str) -> None:
    from server.security import password_problem

    assert password_problem(sep.join(words), ("cy@uni.edu", "Cy Young", "", "Treasure hunt",
                                             "th")) is None


# --- aliases -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("first", "second"), [
    ("bob smith", "bob  smith"),  # a run of spaces shows as one on a page
    ("alice", "ALİCE"),  # a dotted capital I folds to i + a combining dot
])
def test_an_alias_that_only_differs_invisibly_is_refused(world: World, first: str,
                                                         second: str) -> None:
    assert _register(world, alias=first).status_code == 201
    r = world.client.post("/api/auth/register", json={
        "email": "dee@uni.edu", "name": "Dee", "password": "violet-anchor-7391",
        "join_code": world.join_code, "alias": second})
    assert r.status_code == 409 and "taken" in r.json()["detail"], r.text


@pytest.mark.parametrize("alias", ["student-90", "Student-7", "ｓｔｕｄｅｎｔ-1", "student-7O",
                                   "student-l2", "ꜱᴛᴜᴅᴇɴᴛ-3"])
def test_the_boards_own_labels_are_nobodys_alias(world: World, alias: str) -> None:
    """The board shows `student-<id>` for a student without an alias: no one may take one."""
    r = _register(world, alias=alias)
    assert r.status_code == 409 and "taken" in r.json()["detail"], r.text


@pytest.mark.parametrize("alias", ["ada", "Ada", "ADA", "аda", "ａｄａ", "adа", "ᴀᴅᴀ"])
def test_an_alias_that_looks_like_a_taken_one_is_refused(world: World, alias: str) -> None:
    r = _register(world, alias=alias)  # "ada" is taken (a Cyrillic а, fullwidth letters …)
    assert r.status_code == 409 and "taken" in r.json()["detail"], r.text
    assert _register(world, alias="cy").status_code == 201
    r = world.client.post("/api/auth/register", json={
        "email": "dee@uni.edu", "name": "Dee", "password": "violet-anchor-7391",
        "join_code": world.join_code, "alias": "cy"})
    assert r.status_code == 409


def test_a_roster_alias_that_looks_like_a_taken_one_is_refused(world: World) -> None:
    csv = "email,name,alias\ncy@uni.edu,Cy,аda\ndee@uni.edu,Dee,dee\neve@uni.edu,Eve,DEE\n"
    r = world.post(world.prof, "/api/courses/th/roster",
                   files={"roster": ("r.csv", csv.encode())})
    assert r.status_code == 200, r.text
    outcome = {row["email"]: (row["outcome"], row["detail"]) for row in r.json()["rows"]}
    assert outcome["cy@uni.edu"][0] == "refused" and "taken" in outcome["cy@uni.edu"][1]
    assert outcome["dee@uni.edu"][0] == "invited"
    assert outcome["eve@uni.edu"][0] == "refused"


# --- the roster --------------------------------------------------------------------------------


def test_a_roster_with_a_huge_cell_is_refused_not_a_crash(world: World) -> None:
    csv = b"email,name\n" + b'"' + b"x" * (3 << 20) + b'",Big\n'
    r = world.post(world.prof, "/api/courses/th/roster", files={"roster": ("r.csv", csv)})
    assert r.status_code == 422, r.text[:300]


# --- the throttle behind (and without) a proxy -------------------------------------------------


def _serve(tmp_path: Path, port: int, **env: str) -> subprocess.Popen[bytes]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PARAGRADE_SERVER_")}
    base.update(PARAGRADE_SERVER_DATABASE_URL=f"sqlite:///{tmp_path / 'p.db'}",
                PARAGRADE_SERVER_ARTIFACTS_DIR=str(tmp_path / "artifacts"),
                PARAGRADE_SERVER_BROKER_URL=f"sqla+sqlite:///{tmp_path / 'broker.sqlite'}",
                PARAGRADE_SERVER_SECRETS_FILE=str(tmp_path / "var" / "secrets.toml"), **env)
    return subprocess.Popen([sys.executable, "-m", "paragrade.cli", "serve", "--port", str(port),
                             "--no-runner"], env=base, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def _guesses(base: str, forwarded: bool) -> list[int]:
    codes = []
    for n in range(12):
        headers = {"X-Forwarded-For": f"10.1.0.{n}"} if forwarded and n >= 6 else {}
        r = httpx.post(f"{base}/api/auth/token", headers=headers, timeout=30,
                       json={"email": "ada@uni.edu", "password": f"guess-{n}"})
        codes.append(r.status_code)
    return codes


@pytest.mark.parametrize("trusted", [False, True])
def test_x_forwarded_for_counts_only_from_a_configured_proxy(tmp_path: Path,
                                                             trusted: bool) -> None:
    port = free_port()
    env = {"PARAGRADE_SERVER_TRUSTED_PROXIES": '["127.0.0.1"]'} if trusted else {}
    serve = _serve(tmp_path, port, **env)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until("the server", lambda: answers(f"{base}/healthz"), 90)
        codes = _guesses(base, forwarded=True)
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(60)
    assert codes[:5] == [403] * 5 and codes[5] == 429, codes
    if trusted:  # the operator's proxy names the client: each new address is a new client
        # (until the account-wide delay: its 10th checked guess)
        assert codes[6:11] == [403] * 5 and codes[11] == 429, codes
    else:  # the default start: the header is the guesser's, the throttle holds
        assert codes[6:] == [429] * 6, codes


def test_guesses_from_many_addresses_meet_an_account_wide_delay(world: World) -> None:
    def from_(n: int) -> TestClient:
        return TestClient(world.client.app, client=(f"203.0.113.{n}", 40000))

    def guess(n: int, password: str = "wrong-password") -> httpx.Response:
        return from_(n).post("/api/auth/token", json={"email": "ada@uni.edu",
                                                      "password": password})

    assert [guess(n).status_code for n in range(10)] == [403] * 10  # the free ones
    r = guess(10)  # the next address waits (1 s, then 2 s, 4 s … up to a minute)
    assert r.status_code == 429 and r.headers["Retry-After"] == "1", r.text
    for n in range(11, 16):  # knocking while refused does not push the wait further
        assert guess(n).status_code == 429
    r = guess(16, "studentpass1")  # the owner too is told when to try again …
    assert r.status_code == 429 and "try again in 1 minute" in r.json()["detail"]
    time.sleep(1.1)
    assert guess(17, "studentpass1").status_code == 200  # … and gets in then
    # Their login starts the account's count again.
    assert [guess(n).status_code for n in range(20, 25)] == [403] * 5


def test_a_right_password_is_never_counted_as_a_failure_by_a_caller_that_then_refuses(
        world: World, engine: Engine) -> None:
    """An LMS link checks the password, then may refuse (another LMS-made account, a submission
    from the LMS one) and roll back its own work: the forgotten failures stay forgotten, and the
    owner is never locked out by her own right password (the sixth try was refused for 15 min)."""
    from server.db import session_factory
    from server.services.people import users
    from server.services.records.errors import Forbidden

    limits = users.LoginLimits()
    for _ in range(limits.per_account - 1):
        with session_factory(engine)() as s, pytest.raises(Forbidden):
            users.authenticate(session=s, email="ada@uni.edu", password="wrong-guess-12345",
                               address="203.0.113.9", limits=limits)
    for _ in range(limits.per_account + 1):
        with session_factory(engine)() as s:
            users.authenticate(session=s, email="ada@uni.edu", password="studentpass1",
                               address="203.0.113.9", limits=limits)
            s.rollback()  # the caller refused after the check
    with session_factory(engine)() as s:
        assert users.authenticate(session=s, email="ada@uni.edu", password="studentpass1",
                                  address="203.0.113.9", limits=limits).email == "ada@uni.edu"
