"""Speedup measurement: interleaved baseline/submission runs, medians, bootstrap CIs, scaling.

Both sides get the same inputs, drawn per call, and every timed answer is checked on the trusted
side. Each block opens a fresh sandbox per side and makes one untimed warm-up call there (import,
JIT, pool start-up stay out of the samples), on the hook's `make_warmup_input` where it has one: a
small input that still imports, compiles and starts what a call needs, for less than a whole run.
Where the backend can freeze a sandbox (a cgroup freezer), both sides' sandboxes live through the
block and their calls alternate one by one, the idle side frozen: it uses no CPU while the other is
timed, and a core lost for a while to another tenant of the machine spoils a call or two of each
side rather than a whole side of a block. Elsewhere (and for real GPUs, whose queued kernels a
freezer does not stop) a block runs one side's sandbox at a time, never two at once.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from runners.array import ArrayResult
from runners.capacity import Gauge, Windows
from runners.failures import SubmissionFailure, SubmissionRaised
from runners.launch import ScriptResult, run_script
from runners.protocol import (
    Parallelism,
    ScalingPoint,
    SpeedupFigure,
    WeakScalingPoint,
    curve_share,
)
from runners.runconfig import RunConfig
from runners.session import Session

CALLS_PER_BLOCK = 3
EXIT_GRACE_S = 0.0
"""A timing sandbox is killed once its last answer is in, not given time to exit: nobody reads its
output any more, and interpreters' own shutdown (numba's, a process pool's) costs ≈ 0.2 s each."""
BOOTSTRAP = 2000
POINTS_TOLERANCE = 1.0
"""A headline figure stops once its 95 % CI fixes its performance points to within this many."""


class WrongTimedAnswer(Exception):
    """A timed run's answer failed the checker (the submission answered differently when timed)."""


class BaselineBroken(Exception):
    """The instructor's baseline failed during timing: the assignment's fault."""


class FreezeUnavailable(Exception):
    """The backend could not freeze a sandbox: timing goes on one side at a time."""


@dataclass
class Samples:
    workers: int
    baseline: list[float] = field(default_factory=list)
    submission: list[float] = field(default_factory=list)
    paired: bool = False  # some block ran as a frozen pair
    # CPU seconds of the whole sandbox per timed call, beside each time (None: not measurable)
    baseline_cpu: list[float | None] = field(default_factory=list)
    submission_cpu: list[float | None] = field(default_factory=list)
    windows: Windows | None = None  # what the node delivered around each window (capacity)

    def cpu(self) -> tuple[list[float], list[float]] | None:
        """Both sides' CPU seconds per call, or None unless every timed call has them."""
        if len(self.baseline_cpu) != len(self.baseline) or \
                len(self.submission_cpu) != len(self.submission) or not self.submission:
            return None
        b = [c for c in self.baseline_cpu if c is not None]
        s = [c for c in self.submission_cpu if c is not None]
        if len(b) != len(self.baseline) or len(s) != len(self.submission):
            return None
        return b, s


def ratio_ci(baseline: list[float], submission: list[float], *, seed: int = 0,
             level: float = 0.95) -> tuple[float, float, float]:
    """median(baseline)/median(submission) with a percentile-bootstrap CI."""
    b = np.asarray(baseline)
    s = np.asarray(submission)
    point = float(np.median(b) / np.median(s))
    rng = np.random.default_rng(seed)
    bm = np.median(b[rng.integers(0, len(b), (BOOTSTRAP, len(b)))], axis=1)
    sm = np.median(s[rng.integers(0, len(s), (BOOTSTRAP, len(s)))], axis=1)
    lo, hi = np.percentile(bm / sm, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return point, float(lo), float(hi)


def karp_flatt(speedup: float, workers: int) -> float | None:
    """Experimentally determined serial fraction e = (1/S - 1/p) / (1 - 1/p); None where it
    means nothing (one worker, or a superlinear speedup, which would make it negative)."""
    if workers < 2 or speedup <= 0 or speedup > workers:
        return None
    return (1 / speedup - 1 / workers) / (1 - 1 / workers)


def median_ci(values: list[float], *, seed: int = 0, level: float = 0.95) -> tuple[float, float, float]:
    """Median with a percentile-bootstrap CI."""
    v = np.asarray(values)
    rng = np.random.default_rng(seed)
    m = np.median(v[rng.integers(0, len(v), (BOOTSTRAP, len(v)))], axis=1)
    lo, hi = np.percentile(m, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return float(np.median(v)), float(lo), float(hi)


def parallelism(samples: Samples) -> Parallelism | None:
    """Busy cores and work ratio of one worker count's timed calls; None where CPU time was not
    measured for every call."""
    cpu = samples.cpu()
    if cpu is None:
        return None
    base_cpu, sub_cpu = cpu
    busy = [c / t for c, t in zip(sub_cpu, samples.submission, strict=True) if t > 0]
    base_busy = [c / t for c, t in zip(base_cpu, samples.baseline, strict=True) if t > 0]
    if not busy or not base_busy or np.median(base_cpu) <= 0:
        return None
    p, p_lo, p_hi = median_ci(busy)
    if min(base_cpu) <= 0:  # tick resolution: a bootstrap median could be 0
        return None
    w, w_lo, w_hi = ratio_ci(sub_cpu, base_cpu)
    return Parallelism(
        parallelism=round(p, 4), parallelism_ci_low=round(p_lo, 4),
        parallelism_ci_high=round(p_hi, 4), baseline_parallelism=round(float(np.median(base_busy)), 4),
        work_ratio=round(w, 6), work_ratio_ci_low=round(w_lo, 6), work_ratio_ci_high=round(w_hi, 6),
        submission_cpu_median_s=float(np.median(sub_cpu)),
        baseline_cpu_median_s=float(np.median(base_cpu)))


def amdahl_fit(points: list[tuple[int, float]]) -> float | None:
    """Serial fraction f minimising the squared error of S(p) = 1 / (f + (1 - f) / p)."""
    usable = [(p, s) for p, s in points if p > 1 and s > 0]
    if not usable or any(s > p for p, s in usable):  # superlinear: Amdahl's model does not hold
        return None
    grid = np.linspace(0.0, 1.0, 1001)
    p = np.array([u[0] for u in usable], dtype=float)[:, None]
    s = np.array([u[1] for u in usable])[:, None]
    err = ((s - 1 / (grid + (1 - grid) / p)) ** 2).sum(axis=0)
    return float(grid[int(np.argmin(err))])


Checker = Callable[[dict[str, Any], Any], str | None]


@contextlib.contextmanager
def _blamed(side: str) -> Iterator[None]:
    """A failure of the baseline's code is the author's (BaselineBroken), not the student's."""
    try:
        yield
    except (SubmissionFailure, SubmissionRaised) as exc:
        if side == "baseline":
            raise BaselineBroken(f"the baseline failed while timed: {exc}") from exc
        raise


def _judge(problem: str | None, side: str, what: str = "run") -> None:
    """Raise for a timed answer the checker rejected: the author's or the student's fault."""
    if problem is None:
        return
    if side == "baseline":
        raise BaselineBroken(f"the baseline's timed answer is wrong: {problem}")
    raise WrongTimedAnswer(f"a timed {what} returned a wrong answer: {problem}")


def _block(cfg: RunConfig, function: str, inputs: list[dict[str, Any]], check: Checker,
           extra: dict[str, Any], *, side: _Side) -> None:
    with _blamed(side.name):
        _timed_calls(cfg, function, inputs, check, extra, side=side)


def _timed_calls(cfg: RunConfig, function: str, inputs: list[dict[str, Any]], check: Checker,
                 extra: dict[str, Any], *, side: _Side) -> None:
    with Session(cfg, exit_grace_s=EXIT_GRACE_S) as session:
        warm = inputs[0]
        value, _ = session.call(function, **warm, **extra)
        problem = check(warm, value)
        if problem is None:
            for kwargs in inputs[1:]:
                value, elapsed = session.call(function, **kwargs, **extra)
                problem = check(kwargs, value)
                if problem is not None:
                    break
                side.record(elapsed, session.last_cpu_s)
        _judge(problem, side.name)


def measure(*, hook: ModuleType, function: str, workers: int, workers_arg: str | None,
            baseline_cfg: RunConfig, submission_cfg: RunConfig, rng: np.random.Generator,
            stop: StopRule, paired: bool = True,
            on_progress: Callable[[Samples], None] | None = None,
            gauge: Gauge | None = None) -> Samples:
    """A/B blocks at one worker count until `stop` says enough.

    `paired`: try the frozen-pair blocks (a CPU-only run); one side at a time otherwise.
    `gauge`: probe the node around each window and time again those it found short."""
    samples = Samples(workers, windows=gauge.windows if gauge else None)
    started = time.monotonic()
    extra = {workers_arg: workers} if workers_arg else {}
    warm_input = getattr(hook, "make_warmup_input", hook.make_input)
    return _blocks(samples, function, hook.check, [
        _Side("baseline", baseline_cfg, {}, samples.baseline, samples.baseline_cpu),
        _Side("submission", submission_cfg, extra, samples.submission, samples.submission_cpu)],
        lambda: [hook.make_input(rng, workers)] * 2, paired=paired,
        enough=lambda: stop.enough(samples, started), on_progress=on_progress,
        warm=lambda: [warm_input(rng, workers)] * 2, gauge=gauge)


@dataclass
class _Side:
    """One side of a block: whose code (blamed for its failures), how it runs, where its times go."""

    name: str  # baseline | submission
    cfg: RunConfig
    extra: dict[str, Any]
    into: list[float]
    cpu_into: list[float | None]
    pending: list[tuple[float, float | None]] = field(default_factory=list)
    """The current window's calls (seconds, CPU seconds), until its probes say whether they
    count."""

    def record(self, seconds: float, cpu_s: float | None) -> None:
        self.pending.append((seconds, cpu_s))

    def settle(self, counts: bool) -> None:
        """The window is over: its calls join the samples, or are dropped to be timed again."""
        if counts:
            self.into.extend(t for t, _ in self.pending)
            self.cpu_into.extend(c for _, c in self.pending)
        self.pending.clear()


def _settle(sides: list[_Side], gauge: Gauge | None) -> None:
    """End a window: probe the node (where a gauge is given) and keep or drop its calls."""
    counts = gauge is None or gauge.counts()
    for side in sides:
        side.settle(counts)


def _blocks(samples: Samples, function: str, check: Checker, sides: list[_Side],
            draw: Callable[[], list[dict[str, Any]]], *, paired: bool, enough: Callable[[], bool],
            on_progress: Callable[[Samples], None] | None,
            warm: Callable[[], list[dict[str, Any]]] | None = None,
            gauge: Gauge | None = None) -> Samples:
    """Blocks until `enough`; `draw` gives one input per side (in `sides` order) per timed call,
    `warm` (default: `draw`) per sandbox's untimed first call. A window is one turn of a frozen
    pair, or both sides' blocks."""
    warm = warm or draw
    block = 0
    while True:
        order = [1, 0] if block % 2 else [0, 1]  # which side starts alternates
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
                _block(sides[i].cfg, function, list(per_side[i]), check, sides[i].extra,
                       side=sides[i])
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
        sessions: dict[int, Session] = {}
        first = warm()
        for i in order:
            side = sides[i]
            with _blamed(side.name):
                sessions[i] = stack.enter_context(Session(side.cfg, exit_grace_s=EXIT_GRACE_S))
                value, _ = sessions[i].call(function, **first[i], **side.extra)
            _judge(check(first[i], value), side.name)
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
                if not session.freeze(False):
                    raise FreezeUnavailable
                with _blamed(side.name):
                    value, elapsed = session.call(function, **inputs[i], **side.extra)
                if not session.freeze(True):
                    raise FreezeUnavailable
                _judge(check(inputs[i], value), side.name)
                side.record(elapsed, session.last_cpu_s)
            _settle(sides, gauge)
            turn += 1
            if on_progress:
                on_progress(samples)
            if enough() or min(s.seconds_left for s in sessions.values()) < half:
                return


@dataclass(frozen=True)
class StopRule:
    """When one worker count's timing has enough samples: at `max_reps`; from `min_reps` on, once
    the 95 % CI of the ratio is narrow enough; else when `budget_s` is spent (≥ 3 runs each).

    "Narrow enough" is `points_curve`-driven (points, ratio earning none, ratio earning all)
    for a figure that earns points: both ends of the CI must earn the same points to within
    POINTS_TOLERANCE, so a clearly fast or clearly slow submission stops at `min_reps` and only
    a borderline one spends the budget. Figures that earn nothing (the scaling table's smaller
    counts) stop at the relative width `target_width`. Either way the reported CI is the one
    computed from every sample taken."""

    budget_s: float
    min_reps: int
    max_reps: int
    target_width: float
    points_curve: tuple[float, float, float] | None = None

    def enough(self, samples: Samples, started: float) -> bool:
        n = min(len(samples.baseline), len(samples.submission))
        if n >= self.max_reps:
            return True
        if n >= self.min_reps and self.narrow(samples):
            return True
        return time.monotonic() - started > self.budget_s and n >= 3

    def narrow(self, samples: Samples) -> bool:
        point, lo, hi = ratio_ci(samples.baseline, samples.submission)
        if self.points_curve is not None:
            weight, none, full = self.points_curve
            return weight * (curve_share(hi, none, full) - curve_share(lo, none, full)) \
                <= POINTS_TOLERANCE
        return (hi - lo) / point <= self.target_width


STARTUP_RUNS = 3


def _script(cfg: RunConfig, argv: list[str], side: str) -> ScriptResult:
    """One whole program run; one that hit a limit is its side's failure (its exit status and
    files are the check's to judge)."""
    with _blamed(side):
        return run_script(cfg, argv)


@dataclass(frozen=True)
class Startup:
    """What an empty script costs run one side's way: the sandbox, the launcher and its
    interpreters (medians of STARTUP_RUNS runs; cpu_s None where not measured)."""

    wall_s: float
    cpu_s: float | None


def startup(cfg: RunConfig) -> Startup:
    """The start-up of `cfg`, whose code_dir must hold an empty entry script (or the
    launcher's minimal one: MPI's initialisation is the launcher's)."""
    runs = [run_script(cfg, []) for _ in range(STARTUP_RUNS)]
    cpu = [r.cpu_s for r in runs]
    return Startup(float(np.median([r.elapsed_s for r in runs])),
                   None if None in cpu else float(np.median([c for c in cpu if c is not None])))


def without_startup(samples: Samples, baseline: Startup, submission: Startup) -> Samples:
    """Each run's time and CPU time less its side's start-up: what the code's own work took,
    for the busy-core and work-ratio figures (two interpreters starting at once are parallel,
    but not the parallel work an assignment asks for)."""
    def less(values: list[float], by: float) -> list[float]:
        return [max(v - by, 1e-3) for v in values]

    def less_cpu(values: list[float | None], by: float | None) -> list[float | None]:
        return [None if v is None or by is None else max(v - by, 0.0) for v in values]

    return Samples(samples.workers, less(samples.baseline, baseline.wall_s),
                   less(samples.submission, submission.wall_s),
                   baseline_cpu=less_cpu(samples.baseline_cpu, baseline.cpu_s),
                   submission_cpu=less_cpu(samples.submission_cpu, submission.cpu_s))


def _drop_last(samples: Samples, gauge: Gauge | None) -> None:
    """After one A/B pair of whole runs: the gauge's probe says whether the pair counts."""
    if gauge is not None and not gauge.counts():
        for values in (samples.baseline, samples.submission, samples.baseline_cpu,
                       samples.submission_cpu):
            values.pop()


def measure_script(*, hook: ModuleType, workers: int, baseline_cfg: RunConfig,
                   submission_cfg: RunConfig, rng: np.random.Generator, stop: StopRule,
                   gauge: Gauge | None = None) -> Samples:
    """Script entries, timed as whole programs: the baseline script run serially against the
    submission under its launcher with `workers` workers, alternating (A B, then B A), each run
    a fresh sandbox from launch to exit, with the CPU time of the whole sandbox. The arguments
    are drawn per run (`hook.make_args(rng, workers)`) and every run's output is checked
    (`hook.check(argv, result)`). One untimed run of each side first warms the page cache."""
    samples = Samples(workers, windows=gauge.windows if gauge else None)
    sides = [("baseline", baseline_cfg, samples.baseline, samples.baseline_cpu),
             ("submission", submission_cfg, samples.submission, samples.submission_cpu)]
    warm = hook.make_args(rng, workers)
    for side, cfg, _, _ in sides:
        _judge(hook.check(warm, _script(cfg, [str(a) for a in warm], side)), side)
    started = time.monotonic()
    if gauge is not None:
        gauge.begin()
    block = 0
    while True:
        argv = [str(a) for a in hook.make_args(rng, workers)]
        for side, cfg, into, cpu_into in (sides[::-1] if block % 2 else sides):
            result = _script(cfg, argv, side)
            _judge(hook.check(argv, result), side)
            into.append(result.elapsed_s)
            cpu_into.append(result.cpu_s)
        _drop_last(samples, gauge)
        block += 1
        if stop.enough(samples, started):
            return samples


ArrayRun = Callable[[dict[str, Any]], ArrayResult]


def measure_array(*, hook: ModuleType, workers: int, baseline: ArrayRun, submission: ArrayRun,
                  rng: np.random.Generator, stop: StopRule, gauge: Gauge | None = None
                  ) -> Samples:
    """Job arrays: each sample is one whole array's makespan (start-up included on both sides),
    the baseline's single task against the submission's tasks, with the CPU time of all their
    sandboxes; the gathered values (one per task) are checked each time."""
    samples = Samples(workers, windows=gauge.windows if gauge else None)
    started = time.monotonic()
    if gauge is not None:
        gauge.begin()
    block = 0
    while True:
        inputs = hook.make_input(rng, workers)
        sides = [("baseline", baseline, samples.baseline, samples.baseline_cpu),
                 ("submission", submission, samples.submission, samples.submission_cpu)]
        if block % 2:
            sides.reverse()
        for side, run, into, cpu_into in sides:
            with _blamed(side):
                result = run(inputs)
            _judge(hook.check(inputs, result.values), side, "array")
            into.append(result.makespan_s)
            cpu_into.append(result.cpu_s)
        _drop_last(samples, gauge)
        block += 1
        if stop.enough(samples, started):
            return samples


def measure_weak(*, hook: ModuleType, function: str, workers: int, workers_arg: str | None,
                 one_cfg: RunConfig, many_cfg: RunConfig, rng: np.random.Generator,
                 stop: StopRule, paired: bool = True, gauge: Gauge | None = None) -> Samples:
    """Weak scaling at one worker count: the submission alone, interleaved blocks of one worker
    on the one-worker size and `workers` workers on the size for `workers` (make_weak_input);
    `baseline` holds the one-worker times."""
    samples = Samples(workers, windows=gauge.windows if gauge else None)
    started = time.monotonic()

    def args(k: int) -> dict[str, Any]:
        return {workers_arg: k} if workers_arg else {}

    return _blocks(samples, function, hook.check, [
        _Side("submission", one_cfg, args(1), samples.baseline, samples.baseline_cpu),
        _Side("submission", many_cfg, args(workers), samples.submission, samples.submission_cpu)],
        lambda: [hook.make_weak_input(rng, 1), hook.make_weak_input(rng, workers)],
        paired=paired, enough=lambda: stop.enough(samples, started), on_progress=None,
        gauge=gauge)


def summarize_weak(all_samples: list[Samples]) -> list[WeakScalingPoint]:
    """The weak-scaling table: efficiency T(1, size 1) / T(k, size k) with its bootstrap CI."""
    points = []
    for s in sorted(all_samples, key=lambda x: x.workers):
        eff, lo, hi = ratio_ci(s.baseline, s.submission)
        points.append(WeakScalingPoint(
            workers=s.workers, efficiency=round(eff, 4), ci_low=round(lo, 4), ci_high=round(hi, 4),
            one_worker_median_s=float(np.median(s.baseline)),
            submission_median_s=float(np.median(s.submission))))
    return points


def summarize(all_samples: list[Samples]) -> tuple[SpeedupFigure, list[ScalingPoint]]:
    """The headline figure (largest worker count) and the scaling table."""
    points: list[ScalingPoint] = []
    for s in sorted(all_samples, key=lambda x: x.workers):
        sp, lo, hi = ratio_ci(s.baseline, s.submission)
        points.append(ScalingPoint(
            workers=s.workers, speedup=round(sp, 4), efficiency=round(sp / s.workers, 4),
            ci_low=round(lo, 4), ci_high=round(hi, 4),
            submission_median_s=float(np.median(s.submission)),
            karp_flatt=None if (kf := karp_flatt(sp, s.workers)) is None else round(kf, 4),
            cpu=parallelism(s),
        ))
    top = max(all_samples, key=lambda x: x.workers)
    sp, lo, hi = ratio_ci(top.baseline, top.submission)
    figure = SpeedupFigure(
        median=round(sp, 4), ci_low=round(lo, 4), ci_high=round(hi, 4),
        baseline_median_s=float(np.median(top.baseline)),
        submission_median_s=float(np.median(top.submission)),
        repetitions=min(len(top.baseline), len(top.submission)),
    )
    return figure, points
