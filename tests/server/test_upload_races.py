"""Uploads that arrive at the same moment, against a real server (uvicorn, its worker threads) on
SQLite and PostgreSQL: a quota's last slot is taken once, and the same file sent twice at once is
stored once and accepted twice; and an upload that meets a full disk."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import uvicorn
from sqlalchemy import Engine, func, select

from server.db import session_factory
from server.main import create_app
from server.models import Artifact, Submission
from server.settings import ServerSettings
from tests.server.conftest import REFERENCE, World
from tests.server.live import free_port, wait_until

AT_ONCE = 12
URL = "/api/courses/th/assignments/t1-multiprocessing/submissions"


@pytest.fixture
def live(world: World, settings: ServerSettings, engine: Engine) -> Iterator[str]:
    """The world's server, served by uvicorn on a port of its own (requests run side by side)."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings, engine), host="127.0.0.1",
                                           port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until("the server to start", lambda: server.started, 30, 0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def _at_once(base: str, sends: list[tuple[dict[str, str], bytes]], query: str = "",
             urls: list[str] | None = None) -> list[int]:
    """Each (who, file) uploaded at the same moment (a barrier holds every sender until all are
    ready), to URL (or each to its own of `urls`); the status codes in order."""
    start = threading.Barrier(len(sends))

    def send(i: int) -> int:
        who, content = sends[i]
        with httpx.Client(base_url=base, timeout=60) as http:
            start.wait()
            return http.post((urls[i] if urls else URL) + query, headers=who,
                             files=[("files", ("solution.py", content))]).status_code

    with ThreadPoolExecutor(len(sends)) as pool:
        return list(pool.map(send, range(len(sends))))


def _submissions(engine: Engine) -> int:
    with session_factory(engine)() as s:
        return int(s.scalar(select(func.count()).select_from(Submission)) or 0)


def test_a_quotas_last_slot_is_taken_once(world: World, live: str, engine: Engine) -> None:
    r = world.client.patch("/api/courses/th/assignments/t1-multiprocessing",
                           json={"quota_count": 2}, headers=world.prof)
    assert r.status_code == 200, r.text
    assert world.submit(world.ada, REFERENCE).status_code == 201  # one slot left
    codes = _at_once(live, [(world.ada, REFERENCE + f"\n# variant {i}\n".encode())
                            for i in range(AT_ONCE)])
    assert sorted(codes) == [201] + [429] * (AT_ONCE - 1), codes
    assert _submissions(engine) == 2


def test_the_same_file_sent_at_once_is_stored_once(world: World, live: str,
                                                   engine: Engine) -> None:
    """Two students send the starter file at the deadline, each a few times."""
    r = world.client.patch("/api/courses/th/assignments/t1-multiprocessing",
                           json={"quota_count": AT_ONCE}, headers=world.prof)
    assert r.status_code == 200, r.text
    codes = _at_once(live, [(who, REFERENCE) for who in (world.ada, world.bob)] * (AT_ONCE // 2))
    assert codes == [201] * AT_ONCE, codes  # was 500: the artifact's key inserted twice
    with session_factory(engine)() as s:
        archives = set(s.scalars(select(Submission.archive_sha256)))
        assert len(archives) == 1 and s.scalar(select(func.count()).select_from(Artifact).where(
            Artifact.sha256.in_(archives))) == 1
    assert _submissions(engine) == AT_ONCE


@pytest.fixture
def small_disk(settings: ServerSettings) -> Iterator[Path]:
    """The artifacts folder on a 2 MiB tmpfs of its own (root only), before the world's server
    stores anything there."""
    where = settings.artifacts_dir
    where.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs",
                                            str(where)], capture_output=True).returncode != 0:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_refuses_the_upload_and_keeps_nothing_of_it(
        small_disk: Path, world: World, engine: Engine) -> None:
    before = _submissions(engine)
    filler = small_disk / "filler"
    # Fill the disk to its last bytes.
    with filler.open("wb", buffering=0) as fh, contextlib.suppress(OSError):
        while True:
            fh.write(b"\0" * 4096)
    files = {p for p in small_disk.rglob("*") if p.is_file()}
    r = world.submit(world.ada, REFERENCE + b"\n" + b"# padding\n" * 3000)
    assert r.status_code == 507 and "disk is full" in r.json()["detail"], r.text
    assert {p for p in small_disk.rglob("*") if p.is_file()} == files  # no half-written file
    assert _submissions(engine) == before
    filler.unlink()
    assert world.submit(world.ada, REFERENCE).status_code == 201  # room again: taken
