"""Where the time went: one untimed call (or run) of the student's code, every process of its
sandbox sampled from outside by py-spy (`record --subprocesses --idle --nonblocking`: it reads
the processes' memory and never stops them; nothing inside the sandbox changes, and no timed call
is ever profiled).

py-spy records each thread's stack at every tick (`RATE` a second), idle or not, so a sample's
place in its thread's list is its time. A sample is **waiting** where its innermost frame is a
blocking call of the standard library (a lock, a queue's `get`, a pipe's `recv`, `sleep`,
`select`), or a line of the student's own code that calls MPI (mpi4py's methods are compiled:
the line that calls `comm.reduce` is the innermost frame py-spy sees while the rank waits in
it, measured: rank 1 of a 3:1 split, 27 of its 50 samples on that line); otherwise it is
**running**. Everything py-spy gives back came from untrusted processes: names and paths are
plain text, cut to `NAME_MAX`, and only counted.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runners.protocol import Profile, ProfiledFunction, ProfiledProcess

RATE = 100
"""Samples a second of each thread."""
NAME_MAX = 200
TOP = 12
"""The functions a profile lists, by share of the running samples."""
ATTACH_S = 0.4
"""How long py-spy is given to attach before the call starts."""

WAITING_FUNCTIONS = frozenset({
    "sleep", "wait", "acquire", "get", "recv", "recv_bytes", "_recv", "_recv_bytes", "poll",
    "_poll", "select", "join", "accept", "result", "_wait_for_tstate_lock", "readinto",
    "read", "_read", "wait_for", "_handle_workers", "_handle_results", "_handle_tasks"})
"""Innermost frames that block: the thread is waiting (threading, queue, multiprocessing,
selectors, time, concurrent.futures)."""
MPI_CALL = re.compile(r"\.\s*(allreduce|Allreduce|reduce|Reduce|bcast|Bcast|barrier|Barrier|"
                      r"gather|Gather|allgather|Allgather|scatter|Scatter|recv|Recv|send|Send|"
                      r"sendrecv|Sendrecv|wait|Wait|waitall|Waitall|alltoall|Alltoall)\s*\(")
"""A line that calls MPI (mpi4py): a rank on it is in the collective or the message."""


def pyspy() -> str | None:
    """The py-spy beside this interpreter (the runner's venv), else on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.is_file() else shutil.which("py-spy")


@dataclass
class Recording:
    """What py-spy wrote (its speedscope JSON), once the block ends; `error`: why not."""

    data: dict[str, Any] | None = None
    error: str | None = None
    wall_s: float = 0.0


@contextlib.contextmanager
def sampling(pid: int) -> Iterator[Recording]:
    """Sample process `pid` and every process under it for the duration of the block."""
    rec = Recording()
    exe = pyspy()
    if exe is None:
        rec.error = "py-spy is not installed on this runner"
        yield rec
        return
    with tempfile.TemporaryDirectory(prefix="paragrade-profile-") as tmp:
        out = Path(tmp) / "profile.json"
        proc = subprocess.Popen(
            [exe, "record", "--pid", str(pid), "--subprocesses", "--idle", "--nonblocking",
             "--rate", str(RATE), "--format", "speedscope", "--output", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(ATTACH_S)
        started = time.monotonic()
        try:
            yield rec
        finally:
            rec.wall_s = time.monotonic() - started
            proc.send_signal(signal.SIGINT)
            try:
                _, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            try:
                rec.data = json.loads(out.read_text())
            except (OSError, ValueError):
                rec.error = f"py-spy wrote no profile: {(err or '').strip()[-300:]}"


@dataclass
class _Thread:
    pid: int
    before: bool = False  # alive before the call started (the harness; an MPI rank)
    states: list[str] = field(default_factory=list)  # "run" | "wait" | "mpi", one per tick
    leaves: Counter[tuple[str, str, int]] = field(default_factory=Counter)


def _text(value: Any) -> str:
    return str(value)[:NAME_MAX]


def _state(frame: dict[str, Any], source: dict[str, list[str]], harness: str) -> str:
    name, path, line = frame.get("name"), frame.get("file"), frame.get("line")
    if isinstance(name, str) and name.startswith("process ") and not line:
        return "wait"  # py-spy's own frame for a process with no Python frame (starting, ending)
    if isinstance(path, str) and path.startswith(harness):
        return "wait"  # the platform's harness between calls: waiting for its next request
    if isinstance(path, str) and path in source:
        lines = source.get(path, [])
        if isinstance(line, int) and 0 < line <= len(lines) and MPI_CALL.search(lines[line - 1]):
            return "mpi"
    if isinstance(name, str) and name.rsplit(".", 1)[-1] in WAITING_FUNCTIONS:
        return "wait"  # "Condition.wait", "Connection._recv": the method's own name decides
    return "run"


def summarize(rec: Recording, *, code_dir: str, source: dict[str, str], seconds: float,
              harness: str, before: set[int] | None = None) -> Profile:
    """The recording as a report's profile: per process, its running and waiting over time,
    the functions where the running samples were, and the load balance. `code_dir`: where the
    student's files sit as the sandbox sees them; `source`: their text by that path (trusted:
    the staged copy)."""
    if rec.data is None:
        return Profile(sampler="py-spy", interval_s=1 / RATE, seconds=round(seconds, 3),
                       processes=[], top=[], balance=None, note=rec.error or "no samples")
    frames = rec.data.get("shared", {}).get("frames", [])
    lines = {path: text.splitlines() for path, text in source.items()}
    threads: list[_Thread] = []
    # py-spy stops a few milliseconds after the call returns: each thread's last ticks are
    # the call's (a thread that lived before it, as the harness's, also sampled the wait
    # before it started).
    ticks = int(seconds * RATE) + 2
    for prof in rec.data.get("profiles", [])[:256]:
        pid = _pid_of(str(prof.get("name", "")))
        samples = prof.get("samples", [])
        t = _Thread(pid, before=pid in (before or set()))
        for stack in samples[-ticks:] if isinstance(samples, list) else []:
            leaf = frames[stack[-1]] if stack and 0 <= stack[-1] < len(frames) else None
            if leaf is None:
                t.states.append("wait")
                continue
            state = _state(leaf, lines, harness.rstrip("/") + "/")
            t.states.append(state)
            if state == "run":
                t.leaves[(_text(leaf.get("name")), _text(leaf.get("file")),
                          int(leaf.get("line") or 0))] += 1
        threads.append(t)
    # Each process as its busiest thread shows it (a pool's worker, a rank's main thread).
    by_pid: dict[int, _Thread] = {}
    for t in threads:
        best = by_pid.get(t.pid)
        if best is None or t.states.count("run") > best.states.count("run"):
            by_pid[t.pid] = t
    processes = []
    for i, (_pid, t) in enumerate(sorted(by_pid.items())):
        n = len(t.states) or 1
        processes.append(ProfiledProcess(
            label=f"process {i + 1}", started_in_call=not t.before, samples=len(t.states),
            running=round(t.states.count("run") / n, 3),
            waiting=round(t.states.count("wait") / n, 3), in_mpi=round(t.states.count("mpi") / n, 3),
            timeline=_segments(t.states)))
    leaves: Counter[tuple[str, str, int]] = Counter()
    for t in threads:
        leaves.update(t.leaves)
    total = sum(leaves.values()) or 1
    top = [ProfiledFunction(name=name, file=path, line=line, share=round(k / total, 3),
                            own=path.startswith(code_dir.rstrip("/") + "/"))
           for (name, path, line), k in leaves.most_common(TOP)]
    # The workers: the processes the call started (a pool's), else every process (MPI ranks,
    # alive before the call; a serial call's one).
    workers = [p for p in processes if p.started_in_call] or processes
    busy = [p.running for p in workers]
    balance = (round(max(busy) / (sum(busy) / len(busy)), 3)
               if len(busy) > 1 and sum(busy) > 0 else None)
    return Profile(sampler="py-spy", interval_s=1 / RATE, seconds=round(seconds, 3),
                   processes=processes, top=top, balance=balance, note=rec.error)


def _pid_of(name: str) -> int:
    m = re.match(r"Process (\d+)", name)
    return int(m.group(1)) if m else 0


def _segments(states: list[str]) -> list[tuple[float, float, str]]:
    """Runs of one state as (start s, end s, state)."""
    out: list[tuple[float, float, str]] = []
    start = 0
    for i in range(1, len(states) + 1):
        if i == len(states) or states[i] != states[start]:
            out.append((round(start / RATE, 3), round(i / RATE, 3), states[start]))
            start = i
    return out[:2000]
