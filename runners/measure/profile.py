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
import functools
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

from runners.protocol import (
    FlameStack,
    GpuKernel,
    GpuTime,
    Profile,
    ProfiledFunction,
    ProfiledProcess,
)

RATE = 100
"""Samples a second of each thread."""
NAME_MAX = 200
TOP = 12
"""The functions a profile lists, by share of the running samples."""
ATTACH_S = 0.4
"""How long py-spy is given to attach before the call starts."""
LATE_S = 0.1
"""The window's allowance for py-spy stopping after the call returned (`_within_the_call`)."""
MAX_RATE = 250
SAMPLES_WANTED = 50
"""A short call is sampled faster, up to `MAX_RATE`, to give it about this many samples (py-spy
falls behind above it: at 500 a second a 16-thread pool's rounds came 40 % late, measured)."""
THREAD_ROWS = 32
"""A process whose threads ran the student's code (2 to this many) gets a row per thread."""
BALANCE_MAX_WAITING = 0.5
"""At this mean waiting share the workers mostly wait (on I/O): no load balance is given."""
FLAME_STACKS = 120
FLAME_DEPTH = 32
FLAME_NAME_MAX = 60
"""A flame graph's stacks, frames a stack, and characters a frame (at most ~230 KB a report)."""

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
OWN_BLOCKING = re.compile(r"(?:\bsleep|\.acquire|\.recv\w*|\bselect)\s*\(|"
                          r"\.get\(\s*(?:\)|block|timeout)")
"""A line of the student's own that blocks in C (a queue's `get()`, a lock, `time.sleep`)."""
LIBRARY_BLOCKING = re.compile(r"\.(get|put|acquire|wait|recv\w*|readinto|read|accept|result|"
                              r"select|poll|sleep)\s*\(")
STDLIB_WAITING = re.compile(r"/usr/lib/python3[.\d]*/(threading|queue|selectors|socket|"
                            r"subprocess|ssl|concurrent/|multiprocessing/|asyncio/)")
"""Standard-library modules whose lines that call C (`work_queue.get(block=True)`) block."""
KERNEL_FILE = re.compile(r"numba(?:_cuda)?/(?:numba/)?cuda/(?:simulator/kernel|dispatcher)\.py$")
"""numba's kernel launch (the simulator's runs the kernel there and then)."""
KERNEL_LAUNCH = re.compile(r"(\w+)\s*\[")
COPY_FUNCTIONS = frozenset({"copy_to_host", "copy_to_device", "to_device", "to_host"})
SIMULATED_GPU_NOTE = ("profiled the numba CUDA simulator on this runner's CPU, not a GPU: every "
                      "CUDA thread runs as Python here, so the kernels' share is the simulator's "
                      "and says little of a GPU's")


def pyspy() -> str | None:
    """The py-spy beside this interpreter (the runner's venv), else on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.is_file() else shutil.which("py-spy")


@dataclass
class Recording:
    """What py-spy wrote (its speedscope JSON), once the block ends; `error`: why not. `node`:
    the node whose sandbox it sampled (runs over several nodes)."""

    data: dict[str, Any] | None = None
    error: str | None = None
    wall_s: float = 0.0
    rate: int = RATE
    node: str | None = None


def rate_for(call_s: float) -> int:
    """A rate that gives a call of `call_s` seconds some `SAMPLES_WANTED` samples, within
    [RATE, MAX_RATE] (t1's untimed call is a fraction of a second)."""
    return int(min(MAX_RATE, max(RATE, SAMPLES_WANTED / max(call_s, 1e-3))))


@contextlib.contextmanager
def sampling(pid: int, *, rate: int = RATE, node: str | None = None, attach: bool = True
             ) -> Iterator[Recording]:
    """Sample process `pid` and every process under it for the duration of the block (given
    `ATTACH_S` to attach first unless `attach` is False: the caller waits)."""
    rec = Recording(rate=rate, node=node)
    exe = pyspy()
    if exe is None:
        rec.error = "py-spy is not installed on this runner"
        yield rec
        return
    with tempfile.TemporaryDirectory(prefix="paragrade-profile-") as tmp:
        out = Path(tmp) / "profile.json"
        proc = subprocess.Popen(
            [exe, "record", "--pid", str(pid), "--subprocesses", "--idle", "--nonblocking",
             "--rate", str(rate), "--format", "speedscope", "--output", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if attach:
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


@contextlib.contextmanager
def sampling_all(roots: list[tuple[str | None, int]], *, rate: int = RATE
                 ) -> Iterator[list[Recording]]:
    """One sampler per node's sandbox (`roots`: each node's name, None on one node, and its
    sandbox's first process), all for the duration of the block."""
    with contextlib.ExitStack() as stack:
        recs = [stack.enter_context(sampling(pid, rate=rate, node=node, attach=False))
                for node, pid in roots]
        time.sleep(ATTACH_S)
        yield recs


@dataclass
class _Thread:
    node: str | None
    pid: int
    tid: int
    main: bool
    sampled: int  # every sample of it, the call's and those before
    rate: float  # samples a second the recording really got (py-spy falls behind on many threads)
    ticks: int  # the call's samples at that rate
    states: list[str] = field(default_factory=list)  # "run" | "wait" | "mpi", one per tick
    idle: list[bool] = field(default_factory=list)  # per tick: in the harness, or not Python yet
    leaves: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    stacks: Counter[tuple[tuple[str, bool], ...]] = field(default_factory=Counter)
    gpu: Counter[str] = field(default_factory=Counter)  # "kernel:NAME" | "copy" | "host"
    own: bool = False  # ran the student's code during the call


def _text(value: Any) -> str:
    return str(value)[:NAME_MAX]


@functools.lru_cache(maxsize=256)
def _library_lines(path: str) -> tuple[str, ...]:
    """A standard-library module's lines, read from this host (the sandbox's /usr is the host's,
    bound read-only); empty where it is not one of the modules that block."""
    if not STDLIB_WAITING.match(path):
        return ()
    try:
        return tuple(Path(path).read_text(errors="replace").splitlines())
    except OSError:
        return ()


class _Reader:
    """Reads one node's recording: each sample's state, its stack for the flame graph, and a
    GPU call's kernel, copy or host time."""

    def __init__(self, frames: list[Any], source: dict[str, list[str]], harness: str,
                 code_dir: str, gpu: bool) -> None:
        self.frames, self.source, self.gpu = frames, source, gpu
        self.harness, self.code_dir = harness.rstrip("/") + "/", code_dir.rstrip("/") + "/"

    def frame(self, i: Any) -> dict[str, Any]:
        f = self.frames[i] if isinstance(i, int) and 0 <= i < len(self.frames) else None
        return f if isinstance(f, dict) else {}

    def line(self, frame: dict[str, Any]) -> str:
        path, line = frame.get("file"), frame.get("line")
        if not isinstance(path, str) or not isinstance(line, int) or line < 1:
            return ""
        lines = self.source.get(path) or _library_lines(path)
        return lines[line - 1] if line <= len(lines) else ""

    def idle(self, leaf: dict[str, Any]) -> bool:
        """Outside the call: in the harness, waiting for a request, or no Python yet (starting)."""
        name, path = leaf.get("name"), leaf.get("file")
        return ((isinstance(name, str) and name.startswith("process ") and not leaf.get("line"))
                or (isinstance(path, str) and path.startswith(self.harness)))

    def state(self, leaf: dict[str, Any]) -> str:
        """A sample in the call: running, waiting or in MPI (outside it, `idle`, is waiting)."""
        name, path = leaf.get("name"), leaf.get("file")
        text = self.line(leaf)
        if isinstance(path, str) and path in self.source:
            if MPI_CALL.search(text) and not (isinstance(name, str) and name.startswith("<")
                                              and name != "<module>"):
                return "mpi"  # not a `<genexpr>` summing on the line, inside the call's args
            if OWN_BLOCKING.search(text):
                return "wait"  # `q.get()`, `lock.acquire()`, `time.sleep(…)` on their own line
        elif text and LIBRARY_BLOCKING.search(text):
            return "wait"  # a pool's idle worker on `work_queue.get(block=True)`
        if isinstance(name, str) and name.rsplit(".", 1)[-1] in WAITING_FUNCTIONS:
            return "wait"  # "Condition.wait", "Connection._recv": the method's own name decides
        return "run"

    def read(self, t: _Thread, stack: list[Any]) -> None:
        frames = [self.frame(i) for i in stack]
        leaf = frames[-1] if frames else None
        idle = leaf is None or self.idle(leaf)
        state = "wait" if idle or leaf is None else self.state(leaf)
        t.states.append(state)
        t.idle.append(idle)
        if leaf and state == "run":
            t.leaves[(_text(leaf.get("name")), _text(leaf.get("file")),
                      int(leaf.get("line") or 0))] += 1
        # The flame graph's stack: the student's call, from the first frame past the
        # processes' own frames and the harness.
        kept = [f for f in frames if not (str(f.get("name", "")).startswith("process ")
                                          and not f.get("line"))
                and not str(f.get("file", "")).startswith(self.harness)]
        own = [str(f.get("file", "")).startswith(self.code_dir) for f in kept]
        t.own |= any(own)
        if kept:
            labels = tuple((_label(f, self.code_dir), o) for f, o in zip(kept, own, strict=True))
            t.stacks[labels[:FLAME_DEPTH]] += 1
        if self.gpu:
            t.gpu[self.gpu_part(kept, own)] += 1

    def gpu_part(self, frames: list[dict[str, Any]], own: list[bool]) -> str:
        """A GPU call's sample: in a kernel (named by the student's line that launched it), in
        a copy between host and device, or on the host."""
        for i, f in enumerate(frames):
            if KERNEL_FILE.search(str(f.get("file", ""))):
                launch = next((frames[j] for j in range(i - 1, -1, -1) if own[j]), None)
                m = KERNEL_LAUNCH.search(self.line(launch)) if launch else None
                name = m.group(1) if m else (f"line {launch.get('line')}" if launch else "?")
                return f"kernel:{_text(name)}"
            if str(f.get("name", "")).rsplit(".", 1)[-1] in COPY_FUNCTIONS:
                return "copy"
        return "host"


def _label(frame: dict[str, Any], code_dir: str) -> str:
    path = str(frame.get("file", ""))
    where = path[len(code_dir):] if path.startswith(code_dir) else path.rsplit("/", 1)[-1]
    return f"{frame.get('name', '?')} ({where})"[:FLAME_NAME_MAX]


def summarize(recs: Recording | list[Recording], *, code_dir: str, source: dict[str, str],
              seconds: float, harness: str, before: set[int] | None = None,
              gpu_mode: str = "none") -> Profile:
    """The recordings (one per node's sandbox) as a report's profile: per process (per thread
    where its threads shared the work; per node on several), its running and waiting over
    time, the functions where the running samples were, the load balance, a flame graph's
    stacks and, for a GPU call, its kernels, copies and host time. `code_dir`: where the
    student's files sit as the sandbox sees them; `source`: their text by that path (trusted:
    the staged copy)."""
    recs = recs if isinstance(recs, list) else [recs]
    got = [r for r in recs if r.data is not None]
    errors = [f"{r.node}: {r.error}" if r.node else r.error for r in recs if r.error]
    if not got:
        return Profile(sampler="py-spy", interval_s=1 / (recs[0].rate if recs else RATE),
                       seconds=round(seconds, 3), processes=[], top=[], balance=None,
                       note="; ".join(e for e in errors if e) or "no samples")
    lines = {path: text.splitlines() for path, text in source.items()}
    threads, rates = list[_Thread](), list[float]()
    for rec in got:
        assert rec.data is not None
        rate = _real_rate(rec)
        rates.append(rate)
        # Each thread's last ticks are the call's, as the runner waited for it (`wall_s`: on
        # MPI its dispatch to every rank too), not as the harness timed it: rank 1 of a 3:1
        # split summed before the last `seconds` of it. `_within_the_call` cuts the ends.
        ticks = int((max(rec.wall_s, seconds) + LATE_S) * rate) + 2
        reader = _Reader(rec.data.get("shared", {}).get("frames", []), lines, harness,
                         code_dir, gpu=gpu_mode != "none")
        for prof in rec.data.get("profiles", [])[:512]:
            samples = prof.get("samples") if isinstance(prof.get("samples"), list) else []
            pid, tid, main = _ids(str(prof.get("name", "")))
            t = _Thread(rec.node, pid, tid, main, sampled=len(samples), rate=rate, ticks=ticks)
            for stack in samples[-ticks:]:
                reader.read(t, stack if isinstance(stack, list) else [])
            threads.append(t)
    rows = _within_the_call(_rows(threads, split_threads=gpu_mode == "none"))
    processes = _processes(rows, before or set(), several_nodes=len(recs) > 1)
    leaves: Counter[tuple[str, str, int]] = Counter()
    stacks: Counter[tuple[tuple[str, bool], ...]] = Counter()
    for t in rows:
        leaves.update(t.leaves)
        stacks.update(t.stacks)
    total = sum(leaves.values()) or 1
    top = [ProfiledFunction(name=name, file=path, line=line, share=round(k / total, 3),
                            own=path.startswith(code_dir.rstrip("/") + "/"))
           for (name, path, line), k in leaves.most_common(TOP)]
    # The workers: the processes (threads) the call started (a pool's), else every row (MPI
    # ranks, alive before the call; a serial call's one). Balance is of work, the seconds each
    # ran (a worker started late ran as long); none where they mostly wait (threads on I/O).
    pairs = list(zip(rows, processes, strict=True))
    workers = [(t, p) for t, p in pairs if p.started_in_call] or pairs
    busy = [t.states.count("run") / t.rate for t, _ in workers]
    balance = (round(max(busy) / (sum(busy) / len(busy)), 3) if len(busy) > 1 and sum(busy) > 0
               and sum(p.waiting for _, p in workers) / len(busy) < BALANCE_MAX_WAITING else None)
    flame = [FlameStack(frames=[f for f, _ in stack], own=[o for _, o in stack], samples=k)
             for stack, k in stacks.most_common(FLAME_STACKS)]
    return Profile(sampler="py-spy", interval_s=round(1 / min(rates), 5),
                   seconds=round(seconds, 3), processes=processes, top=top, balance=balance,
                   note="; ".join(e for e in errors if e) or None, flame=flame,
                   gpu=_gpu_time(rows, simulated=gpu_mode == "simulated")
                   if gpu_mode != "none" else None)


def _real_rate(rec: Recording) -> float:
    """The samples a second `rec` got: its longest-sampled thread (alive from the start: the
    harness's, a program's first) over the recording's span, at most the rate asked for."""
    counts = [len(p.get("samples", [])) for p in (rec.data or {}).get("profiles", [])
              if isinstance(p, dict) and isinstance(p.get("samples"), list)]
    span = rec.wall_s + ATTACH_S
    return min(float(rec.rate), max(counts, default=0) / span) if counts and span > 0 and max(
        counts) > 0 else float(rec.rate)


def _rows(threads: list[_Thread], *, split_threads: bool) -> list[_Thread]:
    """Each process that ran the student's code as one row, its thread that did (the main one first),
    else its busiest; a row per thread where 2 to THREAD_ROWS of its threads ran the student's
    code (a thread pool's workers). A GPU simulator's threads are CUDA threads: never split."""
    by_proc: dict[tuple[str | None, int], list[_Thread]] = {}
    for t in threads:
        by_proc.setdefault((t.node, t.pid), []).append(t)
    rows: list[_Thread] = []
    anyone = any(t.own for t in threads)
    for key in sorted(by_proc, key=lambda k: (k[0] or "", k[1])):
        ts = sorted(by_proc[key], key=lambda t: (not t.main, t.tid))
        own = [t for t in ts if t.own]
        if anyone and not own:
            continue  # a launcher's (mpiexec's wrapper): it never ran the student's code
        if split_threads and 2 <= len(own) <= THREAD_ROWS:
            rows.extend(own)
        else:
            rows.append(next((t for t in own if t.main), None) or max(
                ts, key=lambda t: (t.own, t.states.count("run"))))
    return rows


def _within_the_call(rows: list[_Thread]) -> list[_Thread]:
    """The rows cut to the ticks from the first to the last where any was in the call: before,
    the call was on its way (on a busy node a rank got it a third of the window late,
    measured); after, py-spy had not stopped. Their ends align: all stopped as it returned."""
    spans = []  # each row's first and last tick in the call, in seconds before the end
    for t in rows:
        if inside := [i for i, idle in enumerate(t.idle) if not idle]:
            spans.append(((len(t.idle) - inside[0]) / t.rate, (len(t.idle) - inside[-1] - 1) / t.rate))
    if not spans:
        return rows  # nothing seen in the call: the whole window, as it was
    first, last = max(s for s, _ in spans), min(e for _, e in spans)
    for t in rows:
        n = len(t.states)
        lo, hi = max(0, n - round(first * t.rate)), max(0, n - round(last * t.rate))
        t.states, t.idle = t.states[lo:hi], t.idle[lo:hi]
    return rows


def _processes(rows: list[_Thread], before: set[int], *, several_nodes: bool) -> list[ProfiledProcess]:
    out: list[ProfiledProcess] = []
    numbers: dict[tuple[str | None, int], int] = {}
    threads_seen: dict[tuple[str | None, int], int] = {}
    split = Counter((t.node, t.pid) for t in rows)
    for t in rows:
        key = (t.node, t.pid)
        numbers.setdefault(key, sum(1 for k in numbers if k[0] == t.node) + 1)
        label = f"process {numbers[key]}"
        thread = None
        if split[key] > 1:
            threads_seen[key] = threads_seen.get(key, 0) + 1
            thread = "main thread" if t.main else f"thread {threads_seen[key] - 1}"
            label += f" · {thread}"
        if several_nodes and t.node:
            label = f"{t.node} · {label}"
        # Started in the call: a process the sandbox did not hold before it, or a thread
        # sampled no longer than the call (one from before was sampled from ATTACH_S earlier).
        started = (t.pid not in before) if thread is None or t.main else (
            t.sampled <= t.ticks + 2)
        n = len(t.states) or 1
        out.append(ProfiledProcess(
            label=label, started_in_call=started, samples=len(t.states),
            running=round(t.states.count("run") / n, 3),
            waiting=round(t.states.count("wait") / n, 3), in_mpi=round(t.states.count("mpi") / n, 3),
            timeline=_segments(t.states, t.rate),
            node=t.node if several_nodes else None, thread=thread))
    return out


def _gpu_time(rows: list[_Thread], *, simulated: bool) -> GpuTime:
    """A GPU call's host time, from the processes' rows (their main threads: a simulator's
    CUDA threads are not rows): in kernels, in copies, on the host."""
    parts: Counter[str] = Counter()
    for t in rows:
        if t.own:
            parts.update(t.gpu)
    n = sum(parts.values()) or 1
    kernels = {k.split(":", 1)[1]: v for k, v in parts.items() if k.startswith("kernel:")}
    note = (SIMULATED_GPU_NOTE if simulated else
            "from the host's samples, this untimed call's kernels launched blocking "
            "(CUDA_LAUNCH_BLOCKING=1): a kernel's time is where the host waits in its launch")
    return GpuTime(kernels=round(sum(kernels.values()) / n, 3), copies=round(parts["copy"] / n, 3),
                   host=round(parts["host"] / n, 3),
                   per_kernel=[GpuKernel(name=k, share=round(v / n, 3))
                               for k, v in sorted(kernels.items(), key=lambda kv: -kv[1])][:TOP],
                   simulated=simulated, note=note)


def _ids(name: str) -> tuple[int, int, bool]:
    """(pid, thread id, main thread) from py-spy's 'Process 12 Thread 3 "MainThread"'."""
    m = re.match(r"Process (\d+)(?: Thread (\d+))?(.*)", name)
    if not m:
        return 0, 0, False
    return int(m.group(1)), int(m.group(2) or 0), '"MainThread"' in m.group(3)


def _segments(states: list[str], ticks_per_s: float) -> list[tuple[float, float, str]]:
    """Runs of one state as (start s, end s, state)."""
    out: list[tuple[float, float, str]] = []
    start = 0
    for i in range(1, len(states) + 1):
        if i == len(states) or states[i] != states[start]:
            out.append((round(start / ticks_per_s, 4), round(i / ticks_per_s, 4), states[start]))
            start = i
    return out[:2000]
