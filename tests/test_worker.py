"""The runner process's HTTP client: one per process, kept across jobs, never shared by a fork."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from runners.fleet.runner import Runner
from runners.settings import RunnerSettings


class _Counting(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    peers: ClassVar[set[int]] = set()

    def do_POST(self) -> None:
        self.peers.add(self.client_address[1])
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Counting.peers = set()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _runner(server: str) -> Runner:
    return Runner(name="r", queues=["cpu"], server=server, token="t",
                  settings=RunnerSettings(backend="process"))


def test_jobs_share_one_client_and_its_connection(server: str) -> None:
    """Every job of a runner process uses the same client: no new client (≈ 30 ms to build) and
    no new connection between two jobs."""
    runner = _runner(server)
    for job in range(3):
        client = runner.jobs_client()
        assert client is runner.jobs_client()
        client.post(f"/api/runner/jobs/{job}/claim").raise_for_status()
    assert len(_Counting.peers) == 1


def test_a_forked_process_makes_its_own_client(server: str) -> None:
    """Celery's pool child is a fork of the runner: it must not use its parent's connections."""
    runner = _runner(server)
    parent = runner.jobs_client()
    parent.post("/api/runner/jobs/1/claim").raise_for_status()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report whether it got a client of its own, then leave at once
        try:
            child = runner.jobs_client()
            child.post("/api/runner/jobs/2/claim").raise_for_status()
            ok = child is not parent and child is runner.jobs_client()
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    got = os.read(read, 1)
    os.waitpid(pid, 0)
    os.close(read)
    assert got == b"1"
    assert runner.jobs_client() is parent
    assert len(_Counting.peers) == 2  # the child connected anew


SLICE = """
import json, os, sys
import numpy as np  # imported before the runner takes its slice, as the runner's modules do
import threadpoolctl
np.ones((64, 64)) @ np.ones((64, 64))  # BLAS threads started for the whole node
from runners.fleet.runner import take_cpus

def seen():
    return {"blas": [p["num_threads"] for p in threadpoolctl.threadpool_info()],
            "cpus": sorted({c for t in os.listdir("/proc/self/task")
                            for c in os.sched_getaffinity(int(t))})}

take_cpus(sys.argv[1])
parent = seen()
r, w = os.pipe()
if os.fork() == 0:  # Celery's pool child
    np.ones((64, 64)) @ np.ones((64, 64))
    os.write(w, json.dumps(seen()).encode())
    os._exit(0)
os.close(w)
print(json.dumps({"parent": parent, "child": json.loads(os.read(r, 4096))}))
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to take one")
def test_a_runner_on_one_core_keeps_every_thread_and_blas_pool_on_it() -> None:
    """Threads numpy's BLAS started before the runner took its slice move onto it, and the pools
    shrink to it: two BLAS threads on one core spin against each other (a trusted check 25×
    slower) and a thread left on the node's other cores runs on a neighbour's slice."""
    core = min(os.sched_getaffinity(0))
    out = subprocess.run([sys.executable, "-c", SLICE, str(core)], capture_output=True,
                         text=True, timeout=120, check=True)
    seen = json.loads(out.stdout)
    for who in ("parent", "child"):
        assert seen[who]["cpus"] == [core], seen
        assert seen[who]["blas"] and all(n == 1 for n in seen[who]["blas"]), seen
