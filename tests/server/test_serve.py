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

from tests.server.live import answers, free_port, serve_env, wait_until

pytestmark = pytest.mark.slow


# (An idle Ctrl-C was a case of its own until 2026-12-07: the queued one sends the same SIGINT to
# the same group, with the runner holding messages too, and SIGTERM covers the idle stop.)
@pytest.mark.parametrize("how", ["SIGTERM", "Ctrl-C while checks are queued"])
def test_a_stop_ends_the_server_and_its_runner_cleanly(tmp_path: Path, how: str) -> None:
    """SIGTERM to an idle server (a service manager), or SIGINT to its whole terminal group
    (Ctrl-C) while the first start's package checks are queued (the runner hands back the
    messages it had taken): the server and its runner stop, with no error line on the way."""
    port = free_port()
    env = serve_env(tmp_path)
    log = (tmp_path / "serve.log").open("wb")
    serve = subprocess.Popen([sys.executable, "-m", "paragrade.cli", "serve", "--port", str(port)],
                             env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until("the server", lambda: answers(f"http://127.0.0.1:{port}/healthz"), 60)

        def children(pid: str | int) -> list[str]:
            return subprocess.run(["pgrep", "-P", str(pid)], capture_output=True,
                                  text=True).stdout.split()

        def runner_pid() -> str | None:
            return next((c for c in children(serve.pid) if b"runner" in Path(
                f"/proc/{c}/cmdline").read_bytes()), None)

        runner = wait_until("the local runner", runner_pid, 30)
        wait_until("the runner's pool process", lambda: children(runner), 60)
        if how.endswith("queued"):  # the shipped courses imported: a dozen checks queued
            made = subprocess.run([sys.executable, "-m", "paragrade.cli", "admin",
                                   "create-instructor", "prof@uni.edu", "--password",
                                   "prof-pass-4821"], env=env, capture_output=True, text=True)
            assert made.returncode == 0, made.stderr
            wait_until("a check to start", lambda: b": validate " in (
                tmp_path / "serve.log").read_bytes(), 60)
        if how == "SIGTERM":
            serve.send_signal(signal.SIGTERM)
        else:
            os.killpg(serve.pid, signal.SIGINT)
        serve.wait(60)
        # The runner went with it (reaped, or at most a zombie), not left serving alone.
        wait_until("the runner to stop", lambda: not Path(f"/proc/{runner}").exists() or
                   "Z (zombie)" in Path(f"/proc/{runner}/status").read_text(), 5)
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGKILL)
    said = (tmp_path / "serve.log").read_text(errors="replace")
    assert "ERROR" not in said and "Traceback" not in said, said[-3000:]
    assert said.rstrip().endswith(f"paragrade stopped (http://127.0.0.1:{port} and its local "
                                  "runner)"), said[-3000:]
    # The runner waited for its server to be up before it calibrated the cores (a calibration
    # made while the server starts beside it reads them slow).
    assert "did not take our hello" not in said, said[-3000:]


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
    env = {**serve_env(tmp_path), "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"), **env}
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


RUNNER_AT_WORK = """
import signal, sys, time, urllib.request

def finish(*_):  # the grading in hand ends, and its result goes to the server
    time.sleep(1)
    with urllib.request.urlopen(sys.argv[1], timeout=5) as r:
        open(sys.argv[2], "w").write(str(r.status))
    sys.exit(0)

signal.signal(signal.SIGTERM, finish)
open(sys.argv[2], "w").write("working")
while True:
    time.sleep(0.1)
"""


def test_a_stop_lets_the_runner_post_its_result_before_the_server_goes(tmp_path: Path) -> None:
    """The local runner is stopped first, the server still answering: the result of the
    grading it holds reaches the server (stopped the other way round, it met a closed port)."""
    import threading

    import uvicorn
    from fastapi import FastAPI

    from server.shutdown import RunnersFirst

    app = FastAPI()

    @app.get("/result")
    def result() -> dict[str, str]:
        return {"taken": "yes"}

    port = free_port()
    said = tmp_path / "runner.txt"
    runner = subprocess.Popen([sys.executable, "-c", RUNNER_AT_WORK,
                               f"http://127.0.0.1:{port}/result", str(said)],
                              start_new_session=True)
    server = RunnersFirst(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"),
                          [runner])
    serving = threading.Thread(target=server.run, daemon=True)
    serving.start()
    try:
        wait_until("the server", lambda: answers(f"http://127.0.0.1:{port}/result"), 30)
        wait_until("the runner at work", lambda: said.exists(), 30)
        server.handle_exit(signal.SIGTERM, None)  # as the signal handler is called
        assert not server.should_exit  # the runner first
        serving.join(60)
        assert not serving.is_alive() and runner.poll() == 0
        assert said.read_text() == "200"  # its result was taken
    finally:
        if runner.poll() is None:
            os.killpg(runner.pid, signal.SIGKILL)
