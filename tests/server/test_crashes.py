"""Crash drills an operator meets: the server killed with SIGKILL in the middle of uploads loses
none of those it answered 201, and serves no half-stored one."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from server import backup
from server.services.records.artifacts import path_of
from server.settings import REPO_ROOT
from tests.server.conftest import REFERENCE
from tests.server.live import answers, free_port, serve_env, wait_until

URL = "/api/courses/treasure-hunt/assignments/t1-multiprocessing/submissions"


@contextlib.contextmanager
def _serving(tmp_path: Path, port: int, **env: str) -> Iterator[subprocess.Popen[bytes]]:
    """`paragrade serve --no-runner`, ready; killed with its process group at the end."""
    log = (tmp_path / "serve.log").open("ab")
    serve = subprocess.Popen([sys.executable, "-m", "paragrade.cli", "serve", "--port", str(port),
                              "--no-runner"], env={**serve_env(tmp_path), **env}, cwd=REPO_ROOT,
                             stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until("the server", lambda: answers(f"http://127.0.0.1:{port}/readyz"), 60)
        yield serve
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(serve.pid, signal.SIGKILL)
        serve.wait(10)


def test_a_server_killed_mid_uploads_keeps_every_upload_it_accepted(tmp_path: Path) -> None:
    made = subprocess.run([sys.executable, "-m", "paragrade.cli", "admin", "create-instructor",
                           "prof@uni.edu", "--password", "orchid-lantern-gravel-41"],
                          env=serve_env(tmp_path), cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300)
    assert made.returncode == 0, made.stderr
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    accepted: list[int] = []
    with _serving(tmp_path, port) as serve:
        token = httpx.post(f"{base}/api/auth/token", json={
            "email": "prof@uni.edu", "password": "orchid-lantern-gravel-41"}).json()["token"]
        prof = {"Authorization": f"Bearer {token}"}

        def upload_50() -> None:  # the staff may upload before a runner checked the package
            with httpx.Client(base_url=base, headers=prof, timeout=30) as http:
                for i in range(50):
                    try:
                        r = http.post(URL, files=[("files", (
                            "solution.py", REFERENCE + f"\n# {i}\n".encode() * (1 + i % 7)))])
                    except httpx.TransportError:
                        return  # the server is gone
                    assert r.status_code == 201, r.text
                    accepted.append(r.json()["id"])

        sender = threading.Thread(target=upload_50)
        sender.start()
        wait_until("uploads under way", lambda: len(accepted) >= 10, 60, 0.005)
        os.killpg(serve.pid, signal.SIGKILL)
        sender.join(60)
    assert 10 <= len(accepted) < 50, len(accepted)

    with _serving(tmp_path, port):
        http = httpx.Client(base_url=base, timeout=30)
        token = http.post("/api/auth/token", json={
            "email": "prof@uni.edu", "password": "orchid-lantern-gravel-41"}).json()["token"]
        prof = {"Authorization": f"Bearer {token}"}
        listed = {s["id"]: s for s in http.get(URL, headers=prof).json()}
        assert set(accepted) <= set(listed), set(accepted) - set(listed)
        assert all(listed[i]["status"] == "queued" for i in accepted)
        # Every row's file is whole (its content is its name); a file the kill left without a
        # row is counted nowhere: a backup takes the rows' files only.
        engine = create_engine(serve_env(tmp_path)["PARAGRADE_SERVER_DATABASE_URL"])
        with engine.connect() as conn:
            rows = {str(s) for (s,) in conn.execute(text("SELECT sha256 FROM artifacts"))}
        engine.dispose()
        artifacts = tmp_path / "artifacts"
        for sha in rows:
            assert hashlib.sha256(path_of(artifacts, sha).read_bytes()).hexdigest() == sha
        took = backup.backup(url=serve_env(tmp_path)["PARAGRADE_SERVER_DATABASE_URL"],
                             artifacts_dir=artifacts, dest=tmp_path / "bk")
        assert took.artifacts == len(rows) and took.submissions == len(listed)
        r = http.post(URL, headers=prof, files=[("files", ("solution.py", REFERENCE))])
        assert r.status_code == 201, r.text  # and it takes uploads again
        http.close()


PG_BIN = Path("/usr/lib/postgresql/15/bin")


@contextlib.contextmanager
def _private_postgresql() -> Iterator[tuple[str, Callable[[], None]]]:
    """A PostgreSQL of this test's own (initdb as the postgres user, a free port): its URL, and
    a function that restarts it (fast shutdown: every connection cut)."""
    if os.geteuid() != 0 or not (PG_BIN / "initdb").exists() or shutil.which("runuser") is None:
        pytest.skip("a private PostgreSQL needs root, runuser and PostgreSQL 15's binaries")
    home = Path(tempfile.mkdtemp(prefix="paragrade-pg-"))  # the postgres user must reach it
    shutil.chown(home, "postgres", "postgres")
    data, port = home / "data", free_port()

    def pg(*args: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *args], check=True,
                       capture_output=True, timeout=120)

    def ctl(*args: str) -> None:
        pg(str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(home / "log"), "-w", *args)

    try:
        pg(str(PG_BIN / "initdb"), "-D", str(data), "--auth=trust", "-U", "postgres")
        ctl("-o", f"-p {port} -k {home} -c listen_addresses=127.0.0.1", "start")
        yield (f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres",
               lambda: ctl("-m", "fast", "restart"))
    finally:
        with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            ctl("-m", "immediate", "stop")
        shutil.rmtree(home, ignore_errors=True)


def test_postgresql_restarted_mid_burst_the_server_recovers_and_loses_nothing(
        tmp_path: Path) -> None:
    with _private_postgresql() as (url, restart):
        env = {"PARAGRADE_SERVER_DATABASE_URL": url}
        made = subprocess.run([sys.executable, "-m", "paragrade.cli", "admin",
                               "create-instructor", "prof@uni.edu", "--password",
                               "orchid-lantern-gravel-41"], env={**serve_env(tmp_path), **env},
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
        assert made.returncode == 0, made.stderr
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        accepted: list[int] = []
        answers_: list[tuple[float, int]] = []  # (when, status; 0: no answer)
        stop = threading.Event()
        with _serving(tmp_path, port, **env):
            token = httpx.post(f"{base}/api/auth/token", json={
                "email": "prof@uni.edu", "password": "orchid-lantern-gravel-41"}).json()["token"]

            def burst() -> None:
                with httpx.Client(base_url=base, timeout=30,
                                  headers={"Authorization": f"Bearer {token}"}) as http:
                    i = 0
                    while not stop.is_set():
                        i += 1
                        try:
                            r = http.post(URL, files=[("files", (
                                "solution.py", REFERENCE + f"\n# {i}\n".encode()))])
                        except httpx.TransportError:
                            answers_.append((time.monotonic(), 0))
                            continue
                        answers_.append((time.monotonic(), r.status_code))
                        if r.status_code == 201:
                            accepted.append(r.json()["id"])

            sender = threading.Thread(target=burst)
            sender.start()
            try:
                wait_until("uploads under way", lambda: len(accepted) >= 10, 60, 0.005)
                restart()
                back = time.monotonic()
                seen = len(accepted)
                wait_until("an upload taken after the restart", lambda: len(accepted) > seen + 5,
                           30, 0.01)
            finally:
                stop.set()
                sender.join(60)
            recovered = next(t for t, code in answers_ if t > back and code == 201) - back
            failed = [code for _, code in answers_ if code != 201]
            assert recovered < 10, recovered  # no restart of its own: the pool reconnects
            assert set(failed) <= {0, 503}, failed  # "try again", never a bare 500
            with httpx.Client(base_url=base, timeout=30,
                              headers={"Authorization": f"Bearer {token}"}) as http:
                listed = {s["id"]: s["status"] for s in http.get(URL).json()}
            assert set(accepted) <= set(listed) and {listed[i] for i in accepted} == {"queued"}
            print(f"PostgreSQL restarted: uploads taken again {recovered:.2f} s after it was back; "
                  f"{len(failed)} of {len(answers_)} uploads refused meanwhile "
                  f"({sorted(set(failed))}); {len(accepted)} accepted, all stored")
