"""How a runner leaves without losing a grading, or measuring one it cannot finish.

A runner started for the queue (a pilot: a SLURM batch job, a pod of a scaled Deployment) does
not stay forever. It leaves in one of three ways, and in none of them is a grading lost:

- **Idle** (`--idle-exit S`): no job for S seconds, it stops taking jobs and exits. A message the
  broker handed it meanwhile is not lost: a warm shutdown finishes the task it started, and an
  unacknowledged message goes back to the broker (acks_late).
- **Drain** (SIGUSR1, `--drain-s D`: the allocation ends in D seconds; SLURM's
  `--signal=B:USR1@D` sends it): no new job; the one it grades finishes if its time limit fits
  before the end, else it is handed back at once. Let run, it would be killed at the end and wait
  out its lease before another runner took it.
- **Taken back** (SIGTERM: `scancel`, a pod deleted, a node reclaimed): the job it grades is
  handed back at once. SIGTERM reaches the sandboxes too (SLURM signals every process of the
  job), so what the grading would measure from then on is the kill, not the submission: a report
  made now would charge the student with the platform's decision.

Handing back (`/api/runner/jobs/{id}/release`) queues the job again for another runner, its
attempt not counted. The pool child, which grades, and the worker's main process, which gets
the signals, share a few numbers through memory mapped before the fork (`Tenure`).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

log = logging.getLogger("paragrade.runner")

BUSY_SINCE, LAST_END, DRAIN_DEADLINE, GRADING, LEAVING = range(5)

MARGIN_S = 30.0
"""Kept between a drained job's worst-case end (its claim plus its time limit) and the
allocation's end: posting the outcome and the worker's own exit take seconds, and SLURM may
send the drain signal up to a minute early or late (its event resolution)."""

NON_GRADE_LIMIT_S = 1800
"""A validation's or comparison's time limit as the runner reckons a drain (their offers carry
none; the server's default job limit)."""


class HandBack(BaseException):
    """Stop grading this job and give it back: the runner is leaving. A BaseException, so that
    no `except Exception` on the way up turns it into a verdict."""


class Tenure:
    """The runner's stay: idle time, the drain deadline, and whether a grading is under way,
    shared between the worker's main process and its pool child."""

    def __init__(self, idle_exit_s: float | None = None, drain_s: float | None = None) -> None:
        self.idle_exit_s = idle_exit_s
        self.drain_s = drain_s
        self.started = time.time()
        self._shared = multiprocessing.RawArray("d", 5)  # mapped shared; inherited by the fork

    # --- the pool child: what the task tells the main process ---------------------------------

    @contextmanager
    def job(self) -> Iterator[None]:
        """In the pool child, around a task: busy for the idle clock, and SIGTERM handing back
        the job being graded (raised in the task's thread, so that the grading's cleanups run).

        Installed per task: billiard sets its own handlers in the child after Celery's
        process-init hooks, and its SIGTERM handler ends the child, grading or not."""
        def taken_back(_signum: int, _frame: FrameType | None) -> None:
            self._shared[LEAVING] = 1.0
            if self._shared[GRADING]:
                self._shared[GRADING] = 0.0  # once: the hand-back itself must not be interrupted
                raise HandBack("the runner was told to stop (SIGTERM: its node is taken back)")
            # claiming, or posting an outcome: seconds, within SLURM's KillWait; then the task
            # ends and the worker's warm shutdown (the main process got SIGTERM too) stops it

        self._shared[BUSY_SINCE] = time.time()
        term = signal.signal(signal.SIGTERM, taken_back)
        # The drain is the main process's; a stray SIGUSR1 must not end a grading here.
        usr1 = signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, term)
            signal.signal(signal.SIGUSR1, usr1)
            self._shared[GRADING] = 0.0
            self._shared[LAST_END] = time.time()
            self._shared[BUSY_SINCE] = 0.0

    def leaving(self) -> bool:
        """Whether the runner is on its way out (drained, idle, told to stop): a task that
        starts now gives its message back unclaimed. A warm shutdown still runs a message the
        worker had already taken, such as the job it just handed back."""
        return bool(self._shared[LEAVING])

    def grading(self, on: bool) -> None:
        """Between claim and outcome: only then does a SIGTERM hand the job back."""
        self._shared[GRADING] = 1.0 if on else 0.0

    def overdue(self, claimed: float, time_limit_s: float) -> str | None:
        """Why a job claimed at `claimed` (epoch seconds) must be handed back now, if a drain
        leaves it too little time to finish."""
        deadline = self._shared[DRAIN_DEADLINE]
        if deadline and claimed + time_limit_s > deadline - MARGIN_S:
            return (f"the runner's allocation ends in {max(0, deadline - time.time()):.0f} s, "
                    f"before the job's time limit ({time_limit_s:.0f} s) would")
        return None

    # --- the worker's main process -------------------------------------------------------------

    def install_parent(self) -> None:
        """In the worker's main thread, once Celery set its own handlers: SIGTERM (Celery's
        warm shutdown) marks the runner leaving first; SIGUSR1 drains."""
        celery_term = signal.getsignal(signal.SIGTERM)

        def term(signum: int, frame: FrameType | None) -> None:
            self._shared[LEAVING] = 1.0
            if callable(celery_term):
                celery_term(signum, frame)

        signal.signal(signal.SIGTERM, term)
        if self.drain_s is None:
            return

        def drain(_signum: int, _frame: FrameType | None) -> None:
            self._shared[LEAVING] = 1.0
            self._shared[DRAIN_DEADLINE] = time.time() + float(self.drain_s or 0)
            log.info("draining: the allocation ends in %.0f s; no new job, the current one "
                     "finishes if it fits, else goes back to the queue", self.drain_s)
            os.kill(os.getpid(), signal.SIGTERM)  # Celery's warm shutdown

        signal.signal(signal.SIGUSR1, drain)

    def watch_idle(self, stop: threading.Event) -> None:
        """In the main process: leave after `idle_exit_s` without a job (Celery's warm shutdown)."""
        if self.idle_exit_s is None:
            return
        while not stop.wait(1.0):
            if self._shared[BUSY_SINCE]:
                continue
            idle = time.time() - max(self.started, self._shared[LAST_END])
            if idle >= self.idle_exit_s:
                self._shared[LEAVING] = 1.0
                log.info("idle for %.0f s: leaving", idle)
                os.kill(os.getpid(), signal.SIGTERM)
                return


def end_now_if_alone() -> None:
    """The worker has stopped (a warm shutdown finished the job in hand): end the process at
    once where no child of it is left alive. Left to the interpreter's exit, billiard's pool
    joins its idle threads one after another, each waking from a sleep of up to a second: a
    stopped runner took 2 s more to end, and a pilot held its allocation that long. Where a
    child lives on (a pool child still ending), the normal exit stops it as before."""
    me = str(os.getpid())
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if fields[1] == me and fields[0] != "Z":  # a live child (a zombie ends with us)
            return
    logging.shutdown()  # what the interpreter's exit would have flushed
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
