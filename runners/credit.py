"""Which part of a measured speedup earns performance points (`scoring.credit`).

A speedup splits exactly into a parallel part and a work part:

    S = T_base / T_sub = (P_sub / P_base) × (CPU_base / CPU_sub) = G / W

with P = CPU seconds / wall seconds of a timed call (busy cores, read from the sandbox's cgroup,
outside the submission's reach), G the parallel gain and W the work ratio. Under "parallel" only
G may earn points, and never more than the allotted cores can give. assignments/README.md gives
the reasoning and the measurements the thresholds below come from.
"""

from __future__ import annotations

from runners.protocol import CORES_TOLERANCE, Credit, ScalingPoint, SpeedupFigure

EXPLAINED_TOLERANCE = 0.15
"""A speedup up to G × (1 + this) counts as explained by the parallel gain G (CPU-time noise)."""
MIN_WORK_RATIO = 0.5
"""Below this share of the baseline's CPU work the speedup comes mostly from doing less work."""
MIN_PARALLEL_GAIN = 1.25
"""Busy cores (relative to the baseline) that count as parallel execution: more than a quarter
of a second core on average."""


def _fraction(w: float) -> str:
    return f"1/{1 / w:,.0f}" if 0 < w < 0.5 else f"{w:.2f}×"


def _cores(n: float) -> str:
    return f"{n:.1f} busy core{'' if round(n, 1) == 1 else 's'}"


def decide(*, policy: str, figure: SpeedupFigure, point: ScalingPoint, cores: int,
           reference_speedup: float | None = None, reference_factor: float = 3.0,
           gpu: bool = False) -> Credit:
    """The credit of the headline speedup `figure`, measured at scaling `point` on `cores`."""
    s = figure.median
    if policy == "any":
        return Credit(policy="any", status="credited", speedup=s, measured=point.cpu is not None,
                      reason="every measured speedup earns points (credit = \"any\")")
    if gpu:
        return _gpu(figure, reference_speedup, reference_factor, measured=point.cpu is not None)
    cap = cores * (1 + CORES_TOLERANCE)
    superlinear = figure.ci_low > cap
    cpu = point.cpu
    if cpu is None:
        if superlinear:
            return Credit(policy="parallel", status="held", speedup=0.0, measured=False, reason=(
                f"a speedup of {s:.2f}× is more than {cores} cores can give, and this runner "
                "could not measure CPU time: held for an instructor's review"))
        return Credit(policy="parallel", status="credited" if s <= cap else "capped",
                      speedup=min(s, cap), measured=False, reason=(
                          f"parallelism not measured on this runner: the speedup counts up to "
                          f"{cores} cores × {1 + CORES_TOLERANCE:g}"))
    base = cpu.baseline_parallelism
    gain, gain_high = ((p / base if base > 0 else 0.0)
                       for p in (cpu.parallelism, cpu.parallelism_ci_high))
    w = cpu.work_ratio
    did = (f"your timed calls did {_fraction(w)} of the baseline's work on "
           f"{_cores(cpu.parallelism)}")
    # Refused only when even the top of the busy cores' CI is serial: short calls on a shared
    # node scatter it widely, and a parallel solution that lands low goes to review instead.
    if w < MIN_WORK_RATIO and gain_high < MIN_PARALLEL_GAIN:
        return Credit(policy="parallel", status="refused", speedup=0.0, measured=True, reason=(
            f"{did}: this speedup ({s:.2f}×) does not come from parallel execution"))
    if w < MIN_WORK_RATIO:
        return Credit(policy="parallel", status="held", speedup=0.0, measured=True, reason=(
            f"{did}: parallel, but most of the {s:.2f}× comes from doing less work than the "
            "baseline; held for an instructor's review"))
    if superlinear:
        return Credit(policy="parallel", status="held", speedup=0.0, measured=True, reason=(
            f"{s:.2f}× on {cores} cores is superlinear ({did}): held for an instructor's "
            "review"))
    if s <= gain * (1 + EXPLAINED_TOLERANCE) and s <= cap:
        return Credit(policy="parallel", status="credited", speedup=s, measured=True, reason=(
            f"{_cores(cpu.parallelism)} against the baseline's {cpu.baseline_parallelism:.1f}, "
            f"work ratio {w:.2f}: parallel execution explains the speedup"))
    # The tolerance is for the noise of measured parallel work only: an answer on one busy core
    # (G below MIN_PARALLEL_GAIN) earns nothing above its gain, however close to 1.15 it is.
    explained = gain * (1 + EXPLAINED_TOLERANCE) if gain >= MIN_PARALLEL_GAIN else gain
    credited = min(s, explained, cap)
    return Credit(policy="parallel", status="capped", speedup=round(credited, 4), measured=True,
                  reason=(f"{did}: parallelism explains {credited:.2f}× of the {s:.2f}×, and "
                          "only that earns points"))


def _gpu(figure: SpeedupFigure, reference: float | None, factor: float, *,
         measured: bool) -> Credit:
    """GPU work: CPU time says little, so a speedup far above the reference's is held."""
    s = figure.median
    if reference is None or reference <= 0:
        return Credit(policy="parallel", status="credited", speedup=s, measured=measured,
                      reason="no reference speedup recorded for this package version: the "
                             "speedup counts as measured")
    if figure.ci_low > reference * factor:
        return Credit(policy="parallel", status="held", speedup=0.0, measured=measured, reason=(
            f"{s:.2f}× is more than {factor:g} times the reference solution's {reference:.2f}×: "
            "held for an instructor's review"))
    return Credit(policy="parallel", status="credited", speedup=s, measured=measured, reason=(
        f"within {factor:g} times the reference solution's {reference:.2f}×"))

