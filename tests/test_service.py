"""The trusted I/O service behind threads-io: answers only over its socket, waits for real."""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from runners import package
from runners.runs import service
from runners.settings import REPO_ROOT

THREADS_IO = REPO_ROOT / "assignments" / "parallel-python" / "threads-io"


def ask(sock: Path, line: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(str(sock))
        s.sendall(line)
        return s.makefile("rb").readline()


def test_records_come_from_the_service_and_reads_overlap() -> None:
    a = package.load(THREADS_IO)
    folder = service.ensure(a)
    assert service.ensure(a) == folder  # one server per process
    sock = folder / service.SOCKET
    module = service.load(a)
    assert ask(sock, b"k-1\n").strip().decode() == module.record("k-1")
    assert ask(sock, b"Bad Key!\n").startswith(b"error")
    assert ask(sock, b"x" * (service.MAX_REQUEST + 10) + b"\n") == b""  # closed, unanswered

    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda i: ask(sock, f"k-{i}\n".encode()).strip().decode(), range(8)))
    elapsed = time.monotonic() - started
    assert got == [module.record(f"k-{i}") for i in range(8)]
    assert module.LATENCY_S <= elapsed < 8 * module.LATENCY_S  # waited, and the waits overlapped


def test_the_socket_lives_in_the_scratch_dir_when_there_is_one(tmp_path: Path) -> None:
    """A runner in a container starts sibling sandboxes: only its scratch dir has the same path
    on the engine's host, so the service's socket must be there (else the sandbox finds none)."""
    a = package.load(THREADS_IO)
    folder = service.ensure(a, tmp_path)
    assert folder.parent == tmp_path
    assert ask(folder / service.SOCKET, b"k-1\n").strip().decode() == service.load(a).record("k-1")
