"""How `paragrade serve` stops: its local runner first, then the server.

The runner is asked to stop while the server still answers, so that the grading it holds
finishes and its result is posted (stopped the other way round, the result met a closed port,
was retried for 30 s and lost with the runner; the job waited for its lease on the next start).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from types import FrameType

import uvicorn

RUNNER_GRACE_S = 30.0
"""How long a stopping runner may take to finish the grading it holds before it is killed with
its sandboxes (the job's lease then re-queues it, never charged to the student)."""


def stop_runners(procs: list[subprocess.Popen[bytes]]) -> None:
    """Stop the local runners: each finishes its job (Celery's warm shutdown) and ends its own
    pool process, signalled alone (signalled as a group, its pool child is logged an ERROR); one
    still at work after RUNNER_GRACE_S is killed with its whole group."""
    for p in procs:
        p.terminate()  # nothing where it has ended already
    for p in procs:
        try:
            p.wait(RUNNER_GRACE_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


class RunnersFirst(uvicorn.Server):
    """uvicorn's server, which on SIGINT or SIGTERM stops the local runners first (in a thread,
    the server answering meanwhile), then itself; a second signal stops it at once."""

    def __init__(self, config: uvicorn.Config, procs: list[subprocess.Popen[bytes]]) -> None:
        super().__init__(config)
        self.procs = procs
        self.stopping: threading.Thread | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.stopping is not None or not any(p.poll() is None for p in self.procs):
            super().handle_exit(sig, frame)
            return

        def then_the_server() -> None:
            stop_runners(self.procs)
            super(RunnersFirst, self).handle_exit(sig, frame)

        self.stopping = threading.Thread(target=then_the_server, daemon=True)
        self.stopping.start()
