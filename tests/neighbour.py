"""A test helper that keeps this node busy: other work on its cores, as a one-machine start's
server and database at a deadline, or a neighbour on a shared node, would be.

`neighbour(n)` starts `n` processes that spin, unpinned, at the sandboxes' own priority (nice 0:
the scheduler shares the cores between them and the sandboxes alike), before the code under test
starts, and stops them after it. Three of them on two cores keep every core oversubscribed: a
probe's spin waits about half its time on a run queue (RUNTIME-NOTES, "Waiting for a CPU").
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

SPIN = "while True: pass"


@contextmanager
def neighbour(n: int = 3, *, settle_s: float = 1.0) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`n` spinning processes for the duration of the block (started `settle_s` before it)."""
    procs = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(n)]
    try:
        if procs:
            time.sleep(settle_s)
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """The neighbour leaves before its block ends (the node frees halfway)."""
    for p in procs:
        p.kill()
        p.wait()
