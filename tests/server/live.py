"""A real platform for end-to-end tests: uvicorn in a thread, the reaper, runner processes."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from server import migrate, reaper
from server.db import make_engine
from server.dispatch import publishing_sessions
from server.main import create_app
from server.services.people import users
from server.settings import REPO_ROOT, ServerSettings
from tests.server.conftest import bearer

TOKEN = "runner-secret-1234"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(what: str, predicate: Callable[[], Any], timeout: float = 120,
               every: float = 0.2) -> Any:
    """The predicate's first truthy value, or fail naming what never happened."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def wait_while_moving(what: str, predicate: Callable[[], Any], moving: Callable[[], Any],
                      stall: float = 120, cap: float = 1800, every: float = 0.5) -> Any:
    """The predicate's first truthy value, waiting as long as the work it waits for moves:
    `moving()` (a snapshot: a job's state and heartbeat, a queue's length) changing restarts the
    `stall` clock. A busy host makes work slower, not stuck; only a stall (or `cap`) fails."""
    start = last_move = time.monotonic()
    seen = moving()
    while time.monotonic() - start < cap:
        value = predicate()
        if value:
            return value
        now, snapshot = time.monotonic(), moving()
        if snapshot != seen:
            seen, last_move = snapshot, now
        elif now - last_move > stall:
            raise AssertionError(f"waiting for {what}: nothing moved for {stall:.0f} s "
                                 f"(last seen: {seen!r})")
        time.sleep(every)
    raise AssertionError(f"timed out after {cap:.0f} s waiting for {what} (last seen: {seen!r})")


def serve_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a `paragrade serve` (or `paragrade admin`) process of a test: SQLite,
    artifacts and the embedded broker in `tmp_path`."""
    return {**os.environ, "PARAGRADE_SERVER_DATABASE_URL": f"sqlite:///{tmp_path / 'p.db'}",
            "PARAGRADE_SERVER_ARTIFACTS_DIR": str(tmp_path / "artifacts"),
            "PARAGRADE_SERVER_BROKER_URL": f"sqla+sqlite:///{tmp_path / 'broker.sqlite'}"}


def answers(url: str) -> bool:
    """The URL answers 200 (a server still starting, or gone, does not)."""
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def redis_server(binary: str, port: int, folder: Path) -> subprocess.Popen[bytes]:
    """A redis-server of our own on 127.0.0.1:`port` that keeps nothing (a restart empties it),
    once it answers."""
    import redis

    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(folder)],
                            stdout=subprocess.DEVNULL)

    def up() -> bool:
        try:
            return bool(redis.Redis(port=port, socket_connect_timeout=1).ping())
        except redis.RedisError:
            return False

    wait_until("redis to start", up, 10, 0.05)
    return proc


class Platform:
    """Server + reaper on `broker_url`, an instructor, and runners started on demand."""

    def __init__(self, tmp: Path, broker_url: str, *, key_prefix: str = "",
                 assignments_dir: Path = REPO_ROOT / "assignments", lease_s: int = 60) -> None:
        url = f"sqlite:///{tmp / 'platform.db'}"
        migrate.upgrade(url)
        self.tmp = tmp
        self.settings = ServerSettings(database_url=url, artifacts_dir=tmp / "artifacts",
                                       assignments_dir=assignments_dir, runner_token=TOKEN,
                                       broker_url=broker_url, broker_key_prefix=key_prefix,
                                       job_lease_s=lease_s, runner_live_s=5)
        self.engine = make_engine(url)
        self.sessions, self.dispatcher = publishing_sessions(self.settings, self.engine)
        with self.sessions() as s, s.begin():
            users.create(session=s, email="prof@uni.edu", name="Prof", password="prof-pass-4821",
                         is_instructor=True)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(create_app(self.settings, self.engine),
                                                    host="127.0.0.1", port=self.port,
                                                    log_level="warning"))
        threading.Thread(target=self.server.run, daemon=True).start()
        wait_until("the server to start", lambda: self.server.started, 30, 0.05)
        self.stop_reaper = reaper.start(self.sessions, self.dispatcher, lease_s=lease_s,
                                        max_attempts=3, every_s=1)
        self.http = httpx.Client(base_url=self.base, timeout=60)
        self.prof = self.login("prof@uni.edu", "prof-pass-4821")
        self.runners: list[subprocess.Popen[bytes]] = []

    def login(self, email: str, password: str) -> dict[str, str]:
        r = self.http.post("/api/auth/token", json={"email": email, "password": password})
        assert r.status_code == 200, r.text
        return bearer(r.json()["token"])

    def course(self, *packages: str, slug: str = "c") -> str:
        """A course with these packages imported (validated once a runner takes them); its join code."""
        r = self.http.post("/api/courses", json={"slug": slug, "title": slug}, headers=self.prof)
        assert r.status_code == 201, r.text
        code = str(r.json()["join_code"])
        for path in packages:
            r = self.http.post(f"/api/courses/{slug}/assignments/import", json={"path": path},
                               headers=self.prof)
            assert r.status_code == 201, r.text
        return code

    def student(self, name: str, join_code: str) -> dict[str, str]:
        r = self.http.post("/api/auth/register", json={
            "email": f"{name}@uni.edu", "name": name, "alias": name,
            "password": "studentpass1", "join_code": join_code})
        assert r.status_code == 201, r.text
        return self.login(f"{name}@uni.edu", "studentpass1")

    def submit(self, who: dict[str, str], assignment: str, code: bytes | dict[str, bytes],
               course: str = "c") -> int:
        """Hand in `code` as solution.py, or the files named in it."""
        files = code if isinstance(code, dict) else {"solution.py": code}
        r = self.http.post(f"/api/courses/{course}/assignments/{assignment}/submissions",
                           files=[("files", (name, body)) for name, body in files.items()],
                           headers=who)
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def get(self, who: dict[str, str], url: str) -> Any:
        r = self.http.get(url, headers=who)
        assert r.status_code == 200, r.text
        return r.json()

    def start_runner(self, name: str, queues: str = "cpu,mpi",
                     env: dict[str, str] | None = None,
                     options: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
        """`paragrade runner` as an operator starts it, in its own process group."""
        log = (self.tmp / f"runner-{name}.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "paragrade.cli", "runner", "--queues", queues, "--name", name,
             "--server", self.base, "--broker", self.settings.broker_url, *options],
            env={**os.environ, "PARAGRADE_RUNNER_TOKEN": TOKEN, "PARAGRADE_HEARTBEAT_S": "1",
                 "PARAGRADE_BROKER_KEY_PREFIX": self.settings.broker_key_prefix, **(env or {})},
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.runners.append(proc)
        return proc

    def runner_log(self, name: str) -> str:
        return (self.tmp / f"runner-{name}.log").read_text(errors="replace")

    def kill(self, proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL,
             patience: float = 30) -> None:
        """Signal the runner's whole process group (its worker child and sandboxes too); SIGKILL
        it after `patience` seconds."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(patience)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def close(self) -> None:
        for proc in self.runners:
            if proc.poll() is None:  # the test is over: a warm shutdown need not be waited out
                self.kill(proc, signal.SIGTERM, patience=2)
        self.stop_reaper.set()
        self.server.should_exit = True
        self.http.close()
