"""A sandbox's wait for a CPU, as the kernel counts it: each thread's run delay (the time it sat
runnable on a run queue, /proc/PID/task/TID/schedstat), read from outside the sandbox. The
timed serial baseline's wait is the busy-node gauge's second witness (runners/measure/capacity.py):
it runs alone, so what it waited is other work on the node."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable


def run_delays(pids: Iterable[int]) -> dict[int, int]:
    """Each live thread of `pids`: the nanoseconds it has sat runnable on a run queue waiting
    for a CPU so far, as the kernel counts it (/proc/PID/task/TID/schedstat), by thread id.
    Empty where the kernel keeps no schedstat."""
    found: dict[int, int] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            for task in os.scandir(f"/proc/{pid}/task"):
                with (contextlib.suppress(OSError, ValueError, IndexError),
                      open(f"{task.path}/schedstat") as fh):
                    found[int(task.name)] = int(fh.read().split()[1])
    return found


class RunDelaySampler:
    """The run delay of a whole program's threads, read every `every_s` seconds while it runs
    (its threads are gone by the time it exits, and with them their schedstat). A fresh run's
    threads start from nothing, so each thread's last reading is what it waited. It reads low,
    never high: the last `every_s` of each thread, and a thread shorter than that, are missed."""

    def __init__(self, pids: Callable[[], set[int] | None], every_s: float = 0.05) -> None:
        self._pids = pids
        self._every_s = every_s
        self._last: dict[int, int] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="run-delay", daemon=True)

    def _sample(self) -> None:
        while True:
            self._last.update(run_delays(self._pids() or ()))
            if self._done.wait(self._every_s):
                return

    def __enter__(self) -> RunDelaySampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()

    @property
    def waited_s(self) -> float | None:
        """Seconds the run's threads waited for a CPU (None: no thread was read)."""
        return sum(self._last.values()) / 1e9 if self._last else None


def waited_between(before: dict[int, int], after: dict[int, int]) -> float | None:
    """Seconds the threads alive at both readings waited for a CPU between them (None: no
    thread was seen twice)."""
    common = before.keys() & after.keys()
    if not common:
        return None
    return sum(max(0, after[t] - before[t]) for t in common) / 1e9


def root_of(pids: set[int]) -> int | None:
    """The first process of a sandbox's `pids`, every other one under it (None: none found)."""
    parents = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                parents[pid] = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    roots = [pid for pid, parent in parents.items() if parent not in pids]
    return min(roots) if roots else None
