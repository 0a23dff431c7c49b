"""The figures drawn from timed samples: the speedup's median ratio and its bootstrap CI, the
scaling tables, Karp–Flatt and Amdahl serial fractions, busy cores and the work ratio."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from runners.measure import placement
from runners.measure.capacity import Windows
from runners.measure.devicework import DeviceCall
from runners.protocol import DeviceWork, Parallelism, ScalingPoint, SpeedupFigure, WeakScalingPoint

BOOTSTRAP = 2000


@dataclass
class Samples:
    """One worker count's timed calls or runs, both sides, in the order they were taken."""

    workers: int
    baseline: list[float] = field(default_factory=list)
    submission: list[float] = field(default_factory=list)
    paired: bool = False  # some block ran as a frozen pair
    # CPU seconds of the whole sandbox per timed call, beside each time (None: not measurable)
    baseline_cpu: list[float | None] = field(default_factory=list)
    submission_cpu: list[float | None] = field(default_factory=list)
    reference: list[float] = field(default_factory=list)
    """The reference's times, where it was timed beside the submission (runners/measure/anchor.py)."""
    reference_cpu: list[float | None] = field(default_factory=list)
    baseline_core: list[int | None] = field(default_factory=list)
    """The core each baseline call was pinned to (runners/measure/placement.py; empty: not placed)."""
    windows: Windows | None = None  # what the node delivered around each window (capacity)
    # What each timed call did on the GPU (real GPUs with NVML only), and its input's bytes
    baseline_device: list[DeviceCall] = field(default_factory=list)
    submission_device: list[DeviceCall] = field(default_factory=list)
    input_bytes: list[int] = field(default_factory=list)
    device_counter: str = ""

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

    def speedup(self, seed: int = 0) -> tuple[float, float, float]:
        """The speedup and its CI, the baseline's time as its placement makes it."""
        return ratio_ci(self.baseline, self.submission, seed=seed, cores=self.baseline_core)


def ratio_ci(baseline: list[float], submission: list[float], *, seed: int = 0,
             level: float = 0.95, cores: Sequence[int | None] = ()) -> tuple[float, float, float]:
    """median(baseline)/median(submission) with a percentile-bootstrap CI. `cores`: where each
    baseline call ran, when the baseline was placed (runners/measure/placement.py: its time is then the
    mean of each core's median)."""
    b = np.asarray(baseline)
    s = np.asarray(submission)
    point = float(placement.baseline_time(b, cores) / np.median(s))
    rng = np.random.default_rng(seed)
    bm = placement.bootstrap_times(b, cores, rng, BOOTSTRAP)
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


def device_work(samples: Samples) -> DeviceWork | None:
    """What the submission's timed calls did on the GPU; None where nothing was watched."""
    calls = samples.submission_device
    if not calls:
        return None

    def moved(of: list[DeviceCall]) -> float | None:
        got = [b for c in of if (b := c.moved_bytes) is not None]
        return float(np.median(got)) if got and len(got) == len(of) else None

    memory = [c.memory_bytes for c in calls if c.memory_bytes is not None]
    on_gpu = None if any(c.on_gpu is None for c in calls) else sum(bool(c.on_gpu) for c in calls)
    return DeviceWork(
        calls=len(calls), on_gpu_calls=on_gpu, moved_bytes=moved(calls),
        input_bytes=float(np.median(samples.input_bytes)) if samples.input_bytes else 0.0,
        baseline_moved_bytes=moved(samples.baseline_device),
        memory_bytes=max(memory) if memory else None, counter=samples.device_counter)


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
        sp, lo, hi = s.speedup()
        points.append(ScalingPoint(
            workers=s.workers, speedup=round(sp, 4), efficiency=round(sp / s.workers, 4),
            ci_low=round(lo, 4), ci_high=round(hi, 4),
            submission_median_s=float(np.median(s.submission)),
            karp_flatt=None if (kf := karp_flatt(sp, s.workers)) is None else round(kf, 4),
            cpu=parallelism(s), device=device_work(s),
        ))
    top = max(all_samples, key=lambda x: x.workers)
    sp, lo, hi = top.speedup()
    figure = SpeedupFigure(
        median=round(sp, 4), ci_low=round(lo, 4), ci_high=round(hi, 4),
        baseline_median_s=placement.baseline_time(top.baseline, top.baseline_core),
        submission_median_s=float(np.median(top.submission)),
        repetitions=min(len(top.baseline), len(top.submission)),
    )
    return figure, points
