"""Timing calls of function entries: interleaved baseline/submission blocks, frozen pairs, weak
scaling (whole programs and job arrays: runners.measure.whole_runs; figures: runners.measure.stats; when to
stop: runners.measure.stopping).

Both sides get the same inputs, drawn per call, and every timed answer is checked on the trusted
side. Each block opens a fresh sandbox per side and makes one untimed warm-up call there (import,
JIT, pool start-up stay out of the samples), on the hook's `make_warmup_input` where it has one: a
small input that still imports, compiles and starts what a call needs, for less than a whole run.
Where the backend can freeze a sandbox (a cgroup freezer), both sides' sandboxes live through the
block and their calls alternate one by one, the idle side frozen: it uses no CPU while the other is
timed, and a core lost for a while to another tenant of the machine spoils a call or two of each
side rather than a whole side of a block. Elsewhere (and for real GPUs, whose queued kernels a
freezer does not stop) a block runs one side's sandbox at a time, never two at once. A package
with `[timing] fresh_calls` gets each call in a fresh process (runners.runs.zygote.FreshCalls): what
the warm-up or a timed call kept is not there for the next.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from runners.measure import placement
from runners.measure.capacity import Gauge
from runners.measure.devicework import DeviceCall, Watch, input_bytes
from runners.measure.stats import Samples
from runners.measure.stopping import StopRule
from runners.runs.failures import SubmissionFailure, SubmissionRaised
from runners.runs.runconfig import RunConfig
from runners.runs.session import Session
from runners.runs.zygote import FreshCalls

CALLS_PER_BLOCK = 3
EXIT_GRACE_S = 0.0
"""A timing sandbox is killed once its last answer is in, not given time to exit: nobody reads its
output any more, and interpreters' own shutdown (numba's, a process pool's) costs ≈ 0.2 s each."""


class WrongTimedAnswer(Exception):
    """A timed run's answer failed the checker (the submission answered differently when timed)."""


class BaselineBroken(Exception):
    """The instructor's baseline (or reference) failed during timing: the assignment's fault."""


class FreezeUnavailable(Exception):
    """The backend could not freeze a sandbox: timing goes on one side at a time."""


Checker = Callable[[dict[str, Any], Any], str | None]


@contextlib.contextmanager
def blamed(side: str) -> Iterator[None]:
    """A failure of the instructor's code (the baseline's, the reference's) is the author's
    (BaselineBroken), not the student's."""
    try:
        yield
    except (SubmissionFailure, SubmissionRaised) as exc:
        if side != "submission":
            raise BaselineBroken(f"the {side} failed while timed: {exc}") from exc
        raise


def judge(problem: str | None, side: str, what: str = "run") -> None:
    """Raise for a timed answer the checker rejected: the author's or the student's fault."""
    if problem is None:
        return
    if side != "submission":
        raise BaselineBroken(f"the {side}'s timed answer is wrong: {problem}")
    raise WrongTimedAnswer(f"a timed {what} returned a wrong answer: {problem}")


def _block(function: str, inputs: list[dict[str, Any]], check: Checker,
           extra: dict[str, Any], *, side: _Side, watch: Watch | None) -> None:
    with blamed(side.name):
        _timed_calls(function, inputs, check, extra, side=side, watch=watch)


def _timed_calls(function: str, inputs: list[dict[str, Any]], check: Checker,
                 extra: dict[str, Any], *, side: _Side, watch: Watch | None) -> None:
    with side.open() as session:
        warm = inputs[0]
        value, _ = session.call(function, **warm, **extra)
        problem = check(warm, value)
        if problem is None:
            for kwargs in inputs[1:]:
                core = side.place(session)
                with (watch.call(session.pids) if watch else contextlib.nullcontext()) as seen:
                    value, elapsed = session.call(function, **kwargs, **extra)
                problem = check(kwargs, value)
                if problem is not None:
                    break
                side.record(elapsed, session.last_cpu_s, seen, input_bytes(kwargs), core,
                            waited_s=session.last_wait_s)
        judge(problem, side.name)


def measure(*, hook: ModuleType, function: str, workers: int, workers_arg: str | None,
            baseline_cfg: RunConfig, submission_cfg: RunConfig, rng: np.random.Generator,
            stop: StopRule, paired: bool = True,
            on_progress: Callable[[Samples], None] | None = None,
            gauge: Gauge | None = None, watch: Watch | None = None, place: bool = True,
            fresh: tuple[list[str], list[str]] | None = None,
            reference_cfg: RunConfig | None = None) -> Samples:
    """A/B blocks at one worker count until `stop` says enough.

    `paired`: try the frozen-pair blocks (a CPU-only run); one side at a time otherwise.
    `gauge`: probe the node around each window and time again those it found short.
    `watch`: read what each timed call did on the GPU (real GPUs).
    `place`: pin the baseline's calls to each of its cores in turn (runners/measure/placement.py).
    `fresh`: each call in a fresh process (runners.runs.zygote.FreshCalls), with the modules its
    zygote preloads for the baseline and for the submission (the reference's: the latter).
    `reference_cfg`: a third side, the package's reference on the submission's cores, timed in
    the same turns on the same inputs (runners/measure/anchor.py)."""
    samples = Samples(workers, windows=gauge.windows if gauge else None,
                      device_counter=watch.counter if watch else "")
    started = time.monotonic()
    extra = {workers_arg: workers} if workers_arg else {}
    warm_input = getattr(hook, "make_warmup_input", hook.make_input)
    sides = [
        _Side("baseline", baseline_cfg, {}, samples.baseline, samples.baseline_cpu,
              samples.baseline_device, cores_into=samples.baseline_core,
              rotation=placement.Rotation(baseline_cfg.limits.cpus if place else ()),
              preload=fresh[0] if fresh else None),
        _Side("submission", submission_cfg, extra, samples.submission, samples.submission_cpu,
              samples.submission_device, samples.input_bytes,
              preload=fresh[1] if fresh else None)]
    if reference_cfg is not None:
        sides.append(_Side("reference", reference_cfg, extra, samples.reference,
                           samples.reference_cpu, preload=fresh[1] if fresh else None))
    return _blocks(samples, function, hook.check, sides,
                   lambda: [hook.make_input(rng, workers)] * len(sides), paired=paired,
                   enough=lambda: stop.enough(samples, started), on_progress=on_progress,
                   warm=lambda: [warm_input(rng, workers)] * len(sides), gauge=gauge, watch=watch)


@dataclass
class _Side:
    """One side of a block: whose code (blamed for its failures), how it runs, where its times go."""

    name: str  # baseline | submission | reference
    cfg: RunConfig
    extra: dict[str, Any]
    into: list[float]
    cpu_into: list[float | None]
    device_into: list[DeviceCall] | None = None
    bytes_into: list[int] | None = None  # each call's input bytes (one side keeps them)
    cores_into: list[int | None] | None = None  # the core each call was pinned to (the baseline)
    rotation: placement.Rotation | None = None  # where the side's calls run (the baseline's)
    preload: list[str] | None = None
    """Each call in a fresh process, its zygote preloading these modules (None: the calls share
    the sandbox's one process)."""
    pending: list[tuple[float, float | None, DeviceCall | None, int, int | None]] = field(
        default_factory=list)
    """The current window's calls (seconds, CPU seconds, GPU work, input bytes, core), until its
    probes say whether they count."""
    waited: list[tuple[float, float]] = field(default_factory=list)
    """The current window's calls whose run delay was read: (seconds, seconds waited for a CPU)."""

    def open(self) -> Session | FreshCalls:
        """The side's sandbox for a block (not yet entered); the baseline's reads its run delay
        (the gauge's second witness, `_settle`)."""
        opened: Session | FreshCalls = (
            FreshCalls(self.cfg, self.preload, exit_grace_s=EXIT_GRACE_S)
            if self.preload is not None else Session(self.cfg, exit_grace_s=EXIT_GRACE_S))
        opened.read_run_delay = self.name == "baseline"
        return opened

    def place(self, session: Session | FreshCalls) -> int | None:
        """Pin the side's sandbox to its next core before a timed call (None: left in place)."""
        core = self.rotation.next() if self.rotation else None
        if core is None or not placement.pin(session.pids(), core):
            return None
        return core

    def record(self, seconds: float, cpu_s: float | None, device: DeviceCall | None = None,
               in_bytes: int = 0, core: int | None = None, waited_s: float | None = None,
               ) -> None:
        self.pending.append((seconds, cpu_s, device, in_bytes, core))
        if waited_s is not None:
            self.waited.append((seconds, waited_s))

    def waiting(self) -> float | None:
        """The share of the current window's timed calls this side's threads waited for a CPU
        (None: not read)."""
        total = sum(seconds for seconds, _ in self.waited)
        return min(1.0, sum(w for _, w in self.waited) / total) if total > 0 else None

    def settle(self, counts: bool) -> None:
        """The window is over: its calls join the samples, or are dropped to be timed again."""
        if counts:
            for seconds, cpu_s, device, in_bytes, core in self.pending:
                self.into.append(seconds)
                self.cpu_into.append(cpu_s)
                if device is not None and self.device_into is not None:
                    self.device_into.append(device)
                if self.bytes_into is not None:
                    self.bytes_into.append(in_bytes)
                if self.cores_into is not None:
                    self.cores_into.append(core)
        self.pending.clear()
        self.waited.clear()


def _settle(sides: list[_Side], gauge: Gauge | None) -> None:
    """End a window: probe the node (where a gauge is given) and keep or drop its calls. The
    serial baseline's own wait for a CPU in the window is the gauge's second witness: it runs
    alone, so what it waited is other work on the node."""
    baseline = [w for side in sides if side.name == "baseline"
                if (w := side.waiting()) is not None]
    counts = gauge is None or gauge.counts(baseline_waiting=max(baseline, default=None))
    for side in sides:
        side.settle(counts)


def _blocks(samples: Samples, function: str, check: Checker, sides: list[_Side],
            draw: Callable[[], list[dict[str, Any]]], *, paired: bool, enough: Callable[[], bool],
            on_progress: Callable[[Samples], None] | None,
            warm: Callable[[], list[dict[str, Any]]] | None = None,
            gauge: Gauge | None = None, watch: Watch | None = None) -> Samples:
    """Blocks until `enough`; `draw` gives one input per side (in `sides` order) per timed call,
    `warm` (default: `draw`) per sandbox's untimed first call. A window is one turn of a frozen
    pair, or both sides' blocks."""
    warm = warm or draw
    orders = list(itertools.permutations(range(len(sides))))  # which side starts, in turn
    block = 0
    while True:
        order = list(orders[block % len(orders)])
        if paired:
            try:
                _paired_block(function, check, sides, order, draw, warm, enough, on_progress,
                              samples, gauge)
            except FreezeUnavailable:
                for side in sides:
                    side.settle(False)
                paired = False
                continue
        else:
            per_side = list(zip(warm(), *[draw() for _ in range(CALLS_PER_BLOCK)], strict=True))
            if gauge is not None:
                gauge.begin()  # no sandbox is alive between blocks
            for i in order:
                _block(function, list(per_side[i]), check, sides[i].extra,
                       side=sides[i], watch=watch)
            _settle(sides, gauge)
        block += 1
        if on_progress:
            on_progress(samples)
        if enough():
            return samples


def _paired_block(function: str, check: Checker, sides: list[_Side], order: list[int],
                  draw: Callable[[], list[dict[str, Any]]], warm: Callable[[], list[dict[str, Any]]],
                  enough: Callable[[], bool], on_progress: Callable[[Samples], None] | None,
                  samples: Samples, gauge: Gauge | None) -> None:
    """Both sides' sandboxes open at once (started in `order`), each frozen while the other
    runs; one call each in turn (ABBA order) until `enough`, or until half of a sandbox's wall
    limit is spent. The gauge probes the node between turns, both sandboxes frozen."""
    with contextlib.ExitStack() as stack:
        sessions: dict[int, Session | FreshCalls] = {}
        first = warm()
        for i in order:
            side = sides[i]
            with blamed(side.name):
                sessions[i] = side.open()
                stack.enter_context(sessions[i])
                value, _ = sessions[i].call(function, **first[i], **side.extra)
            judge(check(first[i], value), side.name)
            if not sessions[i].freeze(True):
                raise FreezeUnavailable
        samples.paired = True
        half = min(side.cfg.limits.wall_s for side in sides) / 2
        if gauge is not None:
            gauge.begin()
        turn = 0
        while True:
            inputs = draw()
            for i in (order[::-1] if turn % 2 else order):
                side, session = sides[i], sessions[i]
                core = side.place(session)  # frozen: it moves when it thaws
                if not session.freeze(False):
                    raise FreezeUnavailable
                with blamed(side.name):
                    value, elapsed = session.call(function, **inputs[i], **side.extra)
                if not session.freeze(True):
                    raise FreezeUnavailable
                judge(check(inputs[i], value), side.name)
                side.record(elapsed, session.last_cpu_s, core=core, waited_s=session.last_wait_s)
            _settle(sides, gauge)
            turn += 1
            if on_progress:
                on_progress(samples)
            if enough() or min(s.seconds_left for s in sessions.values()) < half:
                return


def measure_weak(*, hook: ModuleType, function: str, workers: int, workers_arg: str | None,
                 one_cfg: RunConfig, many_cfg: RunConfig, rng: np.random.Generator,
                 stop: StopRule, paired: bool = True, gauge: Gauge | None = None,
                 fresh: list[str] | None = None) -> Samples:
    """Weak scaling at one worker count: the submission alone, interleaved blocks of one worker
    on the one-worker size and `workers` workers on the size for `workers` (make_weak_input);
    `baseline` holds the one-worker times. `fresh`: as measure's, the submission's modules."""
    samples = Samples(workers, windows=gauge.windows if gauge else None)
    started = time.monotonic()

    def args(k: int) -> dict[str, Any]:
        return {workers_arg: k} if workers_arg else {}

    return _blocks(samples, function, hook.check, [
        _Side("submission", one_cfg, args(1), samples.baseline, samples.baseline_cpu,
              preload=fresh),
        _Side("submission", many_cfg, args(workers), samples.submission, samples.submission_cpu,
              preload=fresh)],
        lambda: [hook.make_weak_input(rng, 1), hook.make_weak_input(rng, workers)],
        paired=paired, enough=lambda: stop.enough(samples, started), on_progress=None,
        gauge=gauge)


