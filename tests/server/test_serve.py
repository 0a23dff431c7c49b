"""`paragrade serve` as an operator runs it: a SIGTERM stops the server and its local runner."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.server.live import free_port, wait_until

pytestmark = pytest.mark.slow


def test_sigterm_stops_the_server_and_its_runner(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "PARAGRADE_SERVER_DATABASE_URL": f"sqlite:///{tmp_path / 'p.db'}",
           "PARAGRADE_SERVER_ARTIFACTS_DIR": str(tmp_path / "artifacts"),
           "PARAGRADE_SERVER_BROKER_URL": f"sqla+sqlite:///{tmp_path / 'broker.sqlite'}"}
    log = (tmp_path / "serve.log").open("wb")
    serve = subprocess.Popen([sys.executable, "-m", "paragrade.cli", "serve", "--port", str(port)],
                             env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        def up() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until("the server", up, 60)
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
