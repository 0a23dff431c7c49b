"""The default start's secrets, jobs bound to their runner, accounts.

Each test guards against one way these went wrong: a one-command start that used the
documented runner token; a fleet-token holder reporting a job another runner claimed;
unthrottled logins; common passwords accepted; unknown accounts answering differently; login
and register forms without a CSRF token; bearer tokens that never expired.
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import time
import tomllib
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from server import reaper, security
from server.models import ApiToken, LoginFailure, now
from server.settings import DEV_SECRET, ServerSettings, UnsafeSecrets, with_local_secrets
from tests.server.conftest import REFERENCE, RUNNER, World, bearer, claim
from tests.server.live import answers, free_port, wait_until

# --- the development start's secrets ---------------------------------------------------------


def test_serve_generates_private_secrets_once_and_keeps_them(tmp_path: Path) -> None:
    path = tmp_path / "var" / "secrets.toml"
    path.parent.mkdir(mode=0o755)  # as an earlier start left it: database and uploads inside
    old_umask = os.umask(0)  # the file's mode comes from its creation, not from the umask
    try:
        first = with_local_secrets(ServerSettings(secrets_file=path))
    finally:
        os.umask(old_umask)
    assert first.runner_token != DEV_SECRET and len(first.runner_token) >= 32
    assert first.secret_key != DEV_SECRET and first.secret_key != first.runner_token
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o077 == 0
    assert tomllib.loads(path.read_text())["runner_token"] == first.runner_token
    again = with_local_secrets(ServerSettings(secrets_file=path))
    assert (again.runner_token, again.secret_key) == (first.runner_token, first.secret_key)
    # A secret the operator set is kept; production settings are never touched.
    mine = with_local_secrets(ServerSettings(secrets_file=path, runner_token="x" * 40))
    assert mine.runner_token == "x" * 40 and mine.secret_key == first.secret_key
    path.chmod(0o644)  # readable by other users: refused, not used
    with pytest.raises(UnsafeSecrets, match="chmod 600"):
        with_local_secrets(ServerSettings(secrets_file=path))


def test_production_refuses_the_documented_secrets() -> None:
    for known in (DEV_SECRET, "runner-secret-1234"):
        with pytest.raises(ValueError, match="RUNNER_TOKEN"):
            ServerSettings(environment="production", secret_key="k" * 32, runner_token=known)


def _serve_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARAGRADE_SERVER_")}
    return {**env, "PARAGRADE_SERVER_DATABASE_URL": f"sqlite:///{tmp_path / 'p.db'}",
            "PARAGRADE_SERVER_ARTIFACTS_DIR": str(tmp_path / "artifacts"),
            "PARAGRADE_SERVER_BROKER_URL": f"sqla+sqlite:///{tmp_path / 'broker.sqlite'}",
            "PARAGRADE_SERVER_SECRETS_FILE": str(tmp_path / "var" / "secrets.toml"), **extra}


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "grader.example"])
def test_serve_refuses_a_known_secret_beyond_loopback(tmp_path: Path, host: str) -> None:
    env = _serve_env(tmp_path, PARAGRADE_SERVER_RUNNER_TOKEN=DEV_SECRET)
    done = subprocess.run([sys.executable, "-m", "paragrade.cli", "serve", "--host", host,
                           "--port", str(free_port()), "--no-runner"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    out = " ".join((done.stdout + done.stderr).split())
    assert "refusing to listen" in out and "PARAGRADE_SERVER_RUNNER_TOKEN" in out


@pytest.mark.slow
def test_the_default_start_gives_its_runner_a_private_token(tmp_path: Path) -> None:
    """`paragrade serve` as the README starts it: the documented token is worthless, and the
    local runner gets the generated one in its environment, never on its command line."""
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    serve = subprocess.Popen([sys.executable, "-m", "paragrade.cli", "serve", "--port", str(port)],
                             env=_serve_env(tmp_path), stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until("the server", lambda: answers(f"{base}/healthz"), 90)
        token = tomllib.loads((tmp_path / "var" / "secrets.toml").read_text())["runner_token"]
        hello = {"name": "intruder", "queues": ["cpu"], "backend": "process", "cores": 1,
                 "memory_mb": 1}
        r = httpx.post(f"{base}/api/runner/hello", json=hello, headers=bearer(DEV_SECRET))
        assert r.status_code == 401, r.text  # the README's token claims nothing any more

        def runner_pid() -> str | None:
            children = subprocess.run(["pgrep", "-P", str(serve.pid)], capture_output=True,
                                      text=True).stdout.split()
            return next((c for c in children if b"runner" in Path(
                f"/proc/{c}/cmdline").read_bytes()), None)

        pid = wait_until("the local runner", runner_pid, 60)
        argv = Path(f"/proc/{pid}/cmdline").read_bytes()
        environ = dict(item.split(b"=", 1) for item in
                       Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if b"=" in item)
        assert token.encode() not in argv
        assert environ[b"PARAGRADE_RUNNER_TOKEN"] == token.encode()
        assert not [k for k in environ if k.startswith(b"PARAGRADE_SERVER_")]
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGTERM)
            try:
                serve.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(serve.pid, signal.SIGKILL)
                serve.wait(10)


# --- a job answers only the runner that claimed it --------------------------------------------


def test_another_fleet_token_holder_cannot_report_a_claimed_job(world: World) -> None:
    c = world.client
    sid = world.submit(world.ada, REFERENCE).json()["id"]
    offer = claim(c, ("cpu",))
    assert offer is not None and offer["job"]["submission_id"] == sid
    jid = offer["job_id"]
    # The fleet token and even the job's own secret, but another runner process's key.
    other = {**RUNNER, "X-Runner-Key": "another-runner-key-987654321", "X-Job-Token": offer["token"]}
    forged = {"report": None, "platform_error": None, "checks": None}
    assert c.post(f"/api/runner/jobs/{jid}/result", json=forged, headers=other).status_code == 403
    assert c.get(f"/api/runner/jobs/{jid}/submission", headers=other).status_code == 403
    assert c.post(f"/api/runner/jobs/{jid}/heartbeat", headers=other).status_code == 403
    no_key = {"Authorization": RUNNER["Authorization"], "X-Job-Token": offer["token"]}
    assert c.post(f"/api/runner/jobs/{jid}/result", json=forged, headers=no_key).status_code == 422
    assert world.get(world.ada, f"/api/submissions/{sid}").json()["status"] == "running"
    # The claimer still can.
    mine = {**RUNNER, "X-Job-Token": offer["token"]}
    assert c.post(f"/api/runner/jobs/{jid}/heartbeat", headers=mine).status_code == 204
    assert c.get(f"/api/runner/jobs/{jid}/submission", headers=mine).status_code == 200


# --- accounts ----------------------------------------------------------------------------------


def _token_login(client: TestClient, email: str, password: str) -> httpx.Response:
    return client.post("/api/auth/token", json={"email": email, "password": password})


def test_failed_logins_are_throttled_per_account_and_address(world: World) -> None:
    c = world.client
    for _ in range(5):  # the settings' default: 5 per (account, address) in 15 minutes
        assert _token_login(c, "ada@uni.edu", "wrong-password").status_code == 403
    r = _token_login(c, "ada@uni.edu", "studentpass1")  # even the right one, from here, waits
    assert r.status_code == 429, r.text
    assert 0 < int(r.headers["Retry-After"]) <= 900 and "try again in" in r.json()["detail"]
    # The real user from elsewhere is not locked out; another account from here is not either.
    elsewhere = TestClient(c.app, client=("203.0.113.7", 40000))
    assert _token_login(elsewhere, "ada@uni.edu", "studentpass1").status_code == 200
    assert _token_login(c, "bob@uni.edu", "studentpass1").status_code == 200
    # An unknown email is throttled alike (a 429 would otherwise tell which emails exist).
    for _ in range(5):
        assert _token_login(c, "nobody@uni.edu", "wrong-password").status_code == 403
    assert _token_login(c, "nobody@uni.edu", "wrong-password").status_code == 429
    # The browser's login form says it too, with the same header.
    page = c.get("/login").text
    token = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert token
    r = c.post("/login", data={"email": "ada@uni.edu", "password": "studentpass1",
                               "csrf_token": token.group(1)}, follow_redirects=False)
    assert r.status_code == 429 and "Retry-After" in r.headers and "try again in" in r.text


def test_many_accounts_from_one_address_are_throttled(client: TestClient, settings: ServerSettings,
                                                      world: World) -> None:
    settings.login_failures_per_address = 8
    for i in range(8):
        assert _token_login(client, f"guess{i}@uni.edu", "wrong-password").status_code == 403
    assert _token_login(client, "ada@uni.edu", "studentpass1").status_code == 429
    elsewhere = TestClient(client.app, client=("203.0.113.8", 40000))
    assert _token_login(elsewhere, "ada@uni.edu", "studentpass1").status_code == 200


@pytest.mark.parametrize("password", ["12345678", "password", "aaaaaaaa", "Password1"])
def test_common_passwords_are_refused(world: World, password: str) -> None:
    r = world.client.post("/api/auth/register", json={
        "email": "cy@uni.edu", "name": "Cy", "password": password, "join_code": world.join_code})
    assert r.status_code == 422 and "common" in r.json()["detail"], r.text


def test_registration_answers_alike_whether_or_not_the_account_exists(world: World) -> None:
    answers = []
    for email in ("ada@uni.edu", "nobody@uni.edu"):
        r = world.client.post("/api/auth/register", json={
            "email": email, "name": "X", "password": "studentpass1", "join_code": "wrong-code"})
        answers.append((r.status_code, r.json()))
    assert answers[0] == answers[1] and answers[0][0] == 404, answers


@pytest.mark.real_password_hash
def test_a_login_for_an_unknown_email_checks_a_password_too(world: World,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    verified: list[str] = []
    real = security._hasher.verify

    def counting(password: str, hashed: str) -> bool:
        verified.append(password)
        return bool(real(password, hashed))

    monkeypatch.setattr(security._hasher, "verify", counting)
    r = _token_login(world.client, "nobody@uni.edu", "wrong-password")
    assert r.status_code == 403 and verified == ["wrong-password"]
    known = _token_login(world.client, "ada@uni.edu", "wrong-password")
    assert known.status_code == r.status_code and known.json() == r.json()
    monkeypatch.undo()

    def timed(email: str) -> float:
        t = time.perf_counter()
        _token_login(TestClient(world.client.app, client=(f"198.51.100.{len(email)}", 1)),
                     email, "wrong-password")
        return time.perf_counter() - t

    unknown = statistics.median(timed("nobody@uni.edu") for _ in range(3))
    known_t = statistics.median(timed("bob@uni.edu") for _ in range(3))
    assert unknown > 0.3 * known_t, (unknown, known_t)  # was 3.6 ms against 136 ms


def test_login_and_register_forms_need_their_csrf_token(world: World) -> None:
    attacker_page = TestClient(world.client.app, follow_redirects=False)
    victim = TestClient(world.client.app, follow_redirects=False)
    victim.get("/login")  # the victim's own session, with its own CSRF token
    stolen = re.search(r'name="csrf_token" value="([^"]+)"', attacker_page.get("/login").text)
    assert stolen
    for form in ({}, {"csrf_token": stolen.group(1)}):
        r = victim.post("/login", data={"email": "bob@uni.edu", "password": "studentpass1",
                                         "next": "/", **form})
        assert r.status_code == 403 and "CSRF" in r.text
        assert victim.get("/", follow_redirects=False).status_code == 303  # not logged in
        r = victim.post("/register", data={"email": "mallory@uni.edu", "name": "M",
                                            "password": "studentpass1", **form,
                                            "join_code": world.join_code})
        assert r.status_code == 403
    r = victim.post("/register", data={"email": "mallory@uni.edu", "name": "M",
                                        "password": "studentpass1", "join_code": world.join_code,
                                        "csrf_token": re.search(
                                            r'name="csrf_token" value="([^"]+)"',
                                            victim.get("/register").text).group(1)})  # type: ignore[union-attr]
    assert r.status_code == 303


def test_bearer_tokens_expire_can_be_revoked_and_are_purged(world: World) -> None:
    c, app = world.client, world.client.app
    ada_hash = security.token_hash(world.ada["Authorization"].split()[1])
    assert c.get("/api/me", headers=world.ada).status_code == 200
    with app.state.sessions() as s, s.begin():  # type: ignore[attr-defined]
        row = s.scalar(select(ApiToken).where(ApiToken.token_hash == ada_hash))
        assert row is not None  # issued for the settings' 30 days
        assert timedelta(days=30) - timedelta(minutes=5) < row.expires_at - row.created_at \
            <= timedelta(days=30, seconds=5)
        row.expires_at = now() - timedelta(seconds=1)
    r = c.get("/api/me", headers=world.ada)
    assert r.status_code == 401 and "log in again" in r.json()["detail"]
    # The user revokes a token (what `paragrade logout` calls).
    assert c.delete("/api/auth/token", headers=world.bob).status_code == 204
    assert c.get("/api/me", headers=world.bob).status_code == 401
    assert _token_login(c, "nobody@uni.edu", "x").status_code == 403  # a failure row
    with app.state.sessions() as s, s.begin():  # type: ignore[attr-defined]
        s.execute(update(LoginFailure).values(at=now() - timedelta(hours=1)))
        before = s.scalar(select(func.count()).select_from(ApiToken))
    reaper.sweep(app.state.sessions, app.state.dispatcher, lease_s=60,  # type: ignore[attr-defined]
                 max_attempts=3, grace_s=30, login_window_s=900)
    with app.state.sessions() as s:  # type: ignore[attr-defined]
        hashes = set(s.scalars(select(ApiToken.token_hash)))
        assert s.scalar(select(func.count()).select_from(LoginFailure)) == 0
    assert len(hashes) == (before or 0) - 2  # the expired and the revoked row are gone
    assert ada_hash not in hashes
    assert security.token_hash(world.prof["Authorization"].split()[1]) in hashes
    assert c.get("/api/me", headers=world.prof).status_code == 200


def test_the_throttle_counts_an_ipv6_host_by_its_64() -> None:
    from server.services.people import users

    assert users._network("2001:db8:1:2::1") == users._network("2001:db8:1:2:ffff::9") \
        == "2001:db8:1:2::/64"
    assert users._network("2001:db8:1:3::1") != users._network("2001:db8:1:2::1")
    assert users._network("10.0.0.7") == "10.0.0.7" and users._network("testclient") == "testclient"
