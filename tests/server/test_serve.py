"""`paragrade serve` as an operator runs it: a SIGTERM stops the server and its local runner;
`--workers N` serves from N processes on one port."""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.server.live import answers, free_port, wait_until

pytestmark = pytest.mark.slow


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "PARAGRADE_SERVER_DATABASE_URL": f"sqlite:///{tmp_path / 'p.db'}",
            "PARAGRADE_SERVER_ARTIFACTS_DIR": str(tmp_path / "artifacts"),
            "PARAGRADE_SERVER_BROKER_URL": f"sqla+sqlite:///{tmp_path / 'broker.sqlite'}"}


def test_sigterm_stops_the_server_and_its_runner(tmp_path: Path) -> None:
    port = free_port()
    env = _env(tmp_path)
    log = (tmp_path / "serve.log").open("wb")
    serve = subprocess.Popen([sys.executable, "-m", "paragrade.cli", "serve", "--port", str(port)],
                             env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until("the server", lambda: answers(f"http://127.0.0.1:{port}/healthz"), 60)

        def runner_pid() -> str | None:
            children = subprocess.run(["pgrep", "-P", str(serve.pid)], capture_output=True,
                                      text=True).stdout.split()
            return next((c for c in children if b"runner" in Path(
                f"/proc/{c}/cmdline").read_bytes()), None)

        runner = wait_until("the local runner", runner_pid, 30)
        serve.send_signal(signal.SIGTERM)
        serve.wait(60)
        # The runner went with it (reaped, or at most a zombie), not left serving alone.
        wait_until("the runner to stop", lambda: not Path(f"/proc/{runner}").exists() or
                   "Z (zombie)" in Path(f"/proc/{runner}/status").read_text(), 5)
    finally:
        if serve.poll() is None:
            serve.kill()


def _healthz_counted(port: int) -> float:
    with httpx.Client() as client:
        text = client.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples
               if sample.name == "paragrade_http_requests_total"
               and sample.labels["route"] == "/healthz")


@contextlib.contextmanager
def _serving(tmp_path: Path, port: int, **env: str
             ) -> Iterator[tuple[subprocess.Popen[bytes], list[str]]]:
    """`paragrade serve --workers 2` (no runner), ready; the supervisor and its two processes.
    Its metrics folder is in `tmp_path` (one `serve` made itself is left behind by a SIGKILL)."""
    log = (tmp_path / "serve.log").open("wb")
    env = {**_env(tmp_path), "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"), **env}
    serve = subprocess.Popen([sys.executable, "-m", "paragrade.cli", "serve", "--port", str(port),
                              "--workers", "2", "--no-runner"], env=env,
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until("the server", lambda: answers(f"http://127.0.0.1:{port}/readyz"), 60)
        workers = subprocess.run(["pgrep", "-P", str(serve.pid), "-f", "spawn_main"],
                                 capture_output=True, text=True).stdout.split()
        assert len(workers) == 2, workers
        yield serve, workers
    finally:
        with contextlib.suppress(ProcessLookupError):  # a failed test leaves no process behind
            os.killpg(serve.pid, signal.SIGKILL)
        serve.wait(10)


def test_several_server_processes_share_one_port_and_their_metrics(tmp_path: Path) -> None:
    port = free_port()
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    (metrics_dir / "counter_1.db").write_bytes(b"stale")  # an earlier run's: removed at start
    with _serving(tmp_path, port) as (serve, workers):
        def one_request(_: int) -> None:  # a connection of its own: any process may accept it
            assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code == 200

        sent = 0
        with ThreadPoolExecutor(4) as pool:
            # Until each process has answered (each keeps its counts in a file of its own).
            while len({p.stem.split("_")[1] for p in metrics_dir.glob("counter_*.db")}) < 2:
                assert sent < 400, "one process answered every request"
                list(pool.map(one_request, range(20)))
                sent += 20
        # A scrape, whichever process answers it, counts every process's requests.
        assert _healthz_counted(port) == sent
        assert _healthz_counted(port) == sent

        # Each process's connections have Nagle off: with it on, every small response waits
        # for the client's delayed ACK (≈ 40 ms), as with uvicorn's own --workers.
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        took = []
        for _ in range(21):
            start = time.perf_counter()
            conn.request("GET", "/healthz")
            conn.getresponse().read()
            took.append(time.perf_counter() - start)
        conn.close()
        assert statistics.median(took) < 0.02, took

        serve.send_signal(signal.SIGTERM)
        assert serve.wait(60) == 0
        wait_until("the server processes to stop",
                   lambda: not any(Path(f"/proc/{w}").exists() for w in workers), 10)


def test_server_processes_end_with_their_supervisor_even_killed(tmp_path: Path) -> None:
    port = free_port()
    with _serving(tmp_path, port) as (serve, workers):
        serve.kill()  # SIGKILL: no chance to stop its processes itself
        serve.wait(10)
        wait_until("the server processes to stop",
                   lambda: not any(Path(f"/proc/{w}").exists() for w in workers), 10)
    with socket.socket() as again:  # the port is free for the next start
        again.bind(("127.0.0.1", port))
