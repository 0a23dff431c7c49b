"""Which part of a measured speedup earns performance points (`scoring.credit`).

A speedup splits exactly into a parallel part and a work part:

    S = T_base / T_sub = (P_sub / P_base) × (CPU_base / CPU_sub) = G / W

with P = CPU seconds / wall seconds of a timed call (busy cores, read from the sandbox's cgroup,
outside the submission's reach), G the parallel gain and W the work ratio. Under "parallel" only
G may earn points, and never more than the allotted cores can give; on more than one allotted
core, a speedup whose calls did no parallel work (`_parallel`) earns none, however lean their
loop: one core's speed is not what a parallel task asks for. assignments/README.md gives the
reasoning and the measurements the thresholds below come from.
"""

from __future__ import annotations

from runners.protocol import (
    CORES_TOLERANCE,
    Credit,
    DeviceWork,
    Parallelism,
    ScalingPoint,
    Scoring,
    SpeedupFigure,
    most_cores_give,
)

EXPLAINED_TOLERANCE = 0.15
"""A speedup up to G × (1 + this) counts as explained by the parallel gain G (CPU-time noise)."""
MIN_WORK_RATIO = 0.5
"""Below this share of the baseline's CPU work the speedup comes mostly from doing less work."""
MIN_PARALLEL_GAIN = 1.25
"""Busy cores (relative to the baseline) that count as parallel execution: more than a quarter
of a second core on average."""
MIN_DEVICE_SHARE = 0.5
"""GPU work moves at least this share of a call's input bytes over the GPU's link: the input
lives in host memory, and work on the device starts by bringing it there."""


def _fraction(w: float) -> str:
    return f"1/{1 / w:,.0f}" if 0 < w < 0.5 else f"{w:.2f}×"


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def _cores(n: float) -> str:
    return f"{n:.1f} busy core{'' if round(n, 1) == 1 else 's'}"


def _parallel(cpu: Parallelism, gain_high: float) -> bool:
    """Whether the timed calls did parallel work: more busy cores than the baseline's, and more
    than one core's worth in themselves. Both, because on a node short of cores the baseline's
    own figure is low too (0.6 busy cores), and the ratio of two starved figures (0.7 / 0.6)
    reads as a gain no second core gave."""
    return gain_high >= MIN_PARALLEL_GAIN and cpu.parallelism_ci_high >= MIN_PARALLEL_GAIN


def stands_on_a_busy_node(credit: Credit, point: ScalingPoint) -> bool:
    """Whether a busy node leaves this decision as it is: held for a person, or refused for doing
    less than half the baseline's work (a work ratio, CPU seconds against CPU seconds, which a
    node short of cores does not lower); every other verdict, credited or refused for no
    parallel work, may be the busy node's doing and waits for a free one."""
    if credit.status == "held":
        return True
    return (credit.status == "refused" and point.cpu is not None
            and point.cpu.work_ratio < MIN_WORK_RATIO)


def decide(*, policy: str, figure: SpeedupFigure, point: ScalingPoint, cores: int,
           reference_speedup: float | None = None,
           reference_factor: float = Scoring.model_fields["reference_factor"].default,
           gpu: bool = False) -> Credit:
    """The credit of the headline speedup `figure`, measured at scaling `point` on `cores`."""
    s = figure.median
    if policy == "any":
        return Credit(policy="any", status="credited", speedup=s, measured=point.cpu is not None,
                      reason="every measured speedup earns points (credit = \"any\")")
    if gpu:
        return _gpu(figure, reference_speedup, reference_factor, measured=point.cpu is not None,
                    device=point.device, cpu=point.cpu, cores=cores)
    cap = most_cores_give(cores)
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
    # Serial on more than one core also by its own busy cores: a closed form's 0.9 against a
    # starved baseline's 0.6 is no parallel work (a SLURM node in CI, 2026-12-02).
    parallel = _parallel(cpu, gain_high) if cores > 1 else gain_high >= MIN_PARALLEL_GAIN
    if w < MIN_WORK_RATIO and not parallel:
        return Credit(policy="parallel", status="refused", speedup=0.0, measured=True, reason=(
            f"{did}: this speedup ({s:.2f}×) does not come from parallel execution"))
    if cores > 1 and not parallel:
        return Credit(policy="parallel", status="refused", speedup=0.0, measured=True, reason=(
            f"{did}, against the baseline's {base:.1f}: no parallel work, so the {s:.2f}× is "
            "one core's speed (a leaner loop, a quieter moment) and earns no performance "
            "points"))
    if w < MIN_WORK_RATIO:
        return Credit(policy="parallel", status="held", speedup=0.0, measured=True, reason=(
            f"{did}: parallel, but most of the {s:.2f}× comes from doing less work than the "
            "baseline; held for an instructor's review"))
    if superlinear:
        return Credit(policy="parallel", status="held", speedup=0.0, measured=True, reason=(
            f"{s:.2f}× on {cores} cores is superlinear ({did}): held for an instructor's "
            "review"))
    explains, against = gain, f"against the baseline's {cpu.baseline_parallelism:.1f}"
    if (a := figure.anchor) is not None and a.cores_versus_reference is not None:
        # Anchored: the gain is the reference's, scaled by busy cores beside it in the same turns.
        explains = a.reference_speedup * a.cores_versus_reference
        against = (f"{a.cores_versus_reference:.2f}× the reference's beside it, whose "
                   f"{a.reference_speedup:.2f}× is parallel")
    if s <= explains * (1 + EXPLAINED_TOLERANCE) and s <= cap:
        return Credit(policy="parallel", status="credited", speedup=s, measured=True, reason=(
            f"{_cores(cpu.parallelism)}, {against}, work ratio {w:.2f}: parallel execution "
            "explains the speedup"))
    # The tolerance is for the noise of measured parallel work only: an answer on one busy core
    # (G below MIN_PARALLEL_GAIN) earns nothing above its gain, however close to 1.15 it is.
    explained = explains * (1 + EXPLAINED_TOLERANCE) if gain >= MIN_PARALLEL_GAIN else explains
    credited = min(s, explained, cap)
    return Credit(policy="parallel", status="capped", speedup=round(credited, 4), measured=True,
                  reason=(f"{did}: parallelism explains {credited:.2f}× of the {s:.2f}×, and "
                          "only that earns points"))


def _off_gpu(s: float, device: DeviceWork) -> str | None:
    """Why the timed calls were not GPU work, from what the driver saw (None: they were)."""
    cpu = "a GPU task answered on the CPU earns no performance points"
    if device.on_gpu_calls is not None and 2 * device.on_gpu_calls < device.calls:
        return (f"{device.calls - device.on_gpu_calls} of your {device.calls} timed calls ran "
                f"with none of your processes on the GPU: the {s:.2f}× comes from the CPU, and {cpu}")
    moved = device.moved_bytes
    if moved is not None and device.input_bytes > 0 and moved < MIN_DEVICE_SHARE * device.input_bytes:
        return (f"your timed calls moved {_mib(moved)} over the GPU's link per call, for an input "
                f"of {_mib(device.input_bytes)}: the {s:.2f}× does not come from work on the GPU, "
                f"and {cpu}")
    return None


def _gpu(figure: SpeedupFigure, reference: float | None, factor: float, *,
         measured: bool, device: DeviceWork | None = None, cpu: Parallelism | None = None,
         cores: int = 1) -> Credit:
    """GPU work: the driver says whether the calls worked on the device (`device`, where it
    could be read); CPU time says little, so a speedup far above the reference's is held, and
    so is one measured on more busy cores than the task grants (`cpu`: only a submission that
    widened its own CPU affinity gets there, where no cpuset confines the sandbox)."""
    s = figure.median
    if device is not None and (why := _off_gpu(s, device)) is not None:
        return Credit(policy="parallel", status="refused", speedup=0.0, measured=measured,
                      reason=why)
    if cpu is not None and cpu.parallelism_ci_low > most_cores_give(cores):
        return Credit(policy="parallel", status="held", speedup=0.0, measured=measured, reason=(
            f"your timed calls kept {_cores(cpu.parallelism)}, more than the {cores} this "
            f"task grants: the {s:.2f}× may come from the CPU; held for an instructor's review"))
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

