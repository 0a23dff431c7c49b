"""Timing whole runs rather than calls: script entries as whole programs (launch to exit, their
start-up measured apart) and job arrays as whole arrays, the two sides alternating A B, B A."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

import numpy as np

from runners.measure import placement
from runners.measure.capacity import Gauge
from runners.measure.stats import Samples
from runners.measure.stopping import StopRule
from runners.measure.timed_calls import blamed, judge
from runners.package import Assignment
from runners.protocol import SpeedupFigure
from runners.runs import batchscript
from runners.runs.array import ArrayRun
from runners.runs.configure import make_config
from runners.runs.launch import ScriptResult, run_script
from runners.runs.runconfig import RunConfig
from runners.runs.stage import Stage
from runners.sandbox import Executor
from runners.settings import RunnerSettings

STARTUP_RUNS = 3


def _script(cfg: RunConfig, argv: list[str], side: str) -> ScriptResult:
    """One whole program run; one that hit a limit is its side's failure (its exit status and
    files are the check's to judge). The serial baseline's runs read their wait for a CPU: it
    runs alone, so what it waited is other work on the node (the gauge's second witness)."""
    with blamed(side):
        return run_script(cfg, argv, read_run_delay=side == "baseline")


def _checked(hook: ModuleType, cfg: RunConfig, argv: list[str], side: str) -> ScriptResult:
    """One run, checked (`hook.check`). A rejected run that exited with a non-zero status is run
    once more with the same arguments: a framework's rare failure as a correct program exits (t5:
    gloo now and then aborts a rank) would otherwise fail the grading's timing. The baseline's
    second run (and the reference's) counts alone; the submission's counts with the failed
    one's wall and CPU time added, so that a submission cannot throw its own slow runs away
    (exit with an error when running late, for a fresh draw). A wrong answer from a run that
    exited cleanly fails at once, as does one that fails twice; a run that hit a limit is not
    run again (`_script` raises)."""
    result = _script(cfg, argv, side)
    problem = hook.check(argv, result)
    if problem is None:
        return result
    if result.returncode == 0:
        judge(problem, side)
    again = _script(cfg, argv, side)
    judge(hook.check(argv, again), side)
    if side != "submission":  # the author's code (the baseline, the reference)
        return again
    cpu = None if result.cpu_s is None or again.cpu_s is None else result.cpu_s + again.cpu_s
    return replace(again, elapsed_s=result.elapsed_s + again.elapsed_s, cpu_s=cpu)


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
    but not the parallel work an assignment asks for). The reference, where it was timed
    beside the submission, ran under the submission's launcher: its start-up is the same."""
    def less(values: list[float], by: float) -> list[float]:
        return [max(v - by, 1e-3) for v in values]

    def less_cpu(values: list[float | None], by: float | None) -> list[float | None]:
        return [None if v is None or by is None else max(v - by, 0.0) for v in values]

    return Samples(samples.workers, less(samples.baseline, baseline.wall_s),
                   less(samples.submission, submission.wall_s),
                   baseline_cpu=less_cpu(samples.baseline_cpu, baseline.cpu_s),
                   submission_cpu=less_cpu(samples.submission_cpu, submission.cpu_s),
                   baseline_core=list(samples.baseline_core),
                   reference=less(samples.reference, submission.wall_s),
                   reference_cpu=less_cpu(samples.reference_cpu, submission.cpu_s))


def _drop_last(samples: Samples, gauge: Gauge | None, baseline: ScriptResult | None = None
               ) -> None:
    """After one A/B pair of whole runs: the gauge's probe, and the share of its run the
    `baseline` waited for a CPU, say whether the pair counts."""
    waiting = (min(1.0, baseline.waited_s / baseline.elapsed_s) if baseline is not None
               and baseline.waited_s is not None and baseline.elapsed_s > 0 else None)
    if gauge is not None and not gauge.counts(baseline_waiting=waiting):
        for values in (samples.baseline, samples.submission, samples.baseline_cpu,
                       samples.submission_cpu, samples.baseline_core, samples.reference,
                       samples.reference_cpu):
            if values:  # baseline_core: empty where the baseline was not placed
                values.pop()


def measure_script(*, hook: ModuleType, workers: int, baseline_cfg: RunConfig,
                   submission_cfg: RunConfig, rng: np.random.Generator, stop: StopRule,
                   gauge: Gauge | None = None, place: bool = True,
                   reference_cfg: RunConfig | None = None) -> Samples:
    """Script entries, timed as whole programs: the baseline script run serially against the
    submission under its launcher with `workers` workers, alternating (A B, then B A), each run
    a fresh sandbox from launch to exit, with the CPU time of the whole sandbox. The arguments
    are drawn per run (`hook.make_args(rng, workers)`) and every run's output is checked
    (`_checked`: a rejected run is run once more). One untimed run of each side first warms the
    page cache. `place`: each baseline run's sandbox gets one core of the set, in turn
    (runners/measure/placement.py). `reference_cfg`: a third side, the package's reference
    under the submission's launcher and cores, run in the same turns with the same arguments
    (runners/measure/anchor.py; the order B S R, then R S B)."""
    samples = Samples(workers, windows=gauge.windows if gauge else None)
    sides = [("baseline", baseline_cfg, samples.baseline, samples.baseline_cpu),
             ("submission", submission_cfg, samples.submission, samples.submission_cpu)]
    if reference_cfg is not None:
        sides.append(("reference", reference_cfg, samples.reference, samples.reference_cpu))
    warm = hook.make_args(rng, workers)
    for side, cfg, _, _ in sides:
        _checked(hook, cfg, [str(a) for a in warm], side)
    started = time.monotonic()
    if gauge is not None:
        gauge.begin()
    rotation = placement.Rotation(baseline_cfg.limits.cpus if place else ())
    block = 0
    while True:
        argv = [str(a) for a in hook.make_args(rng, workers)]
        baseline = None
        for side, cfg, into, cpu_into in (sides[::-1] if block % 2 else sides):
            if side == "baseline" and (core := rotation.next()) is not None:
                cfg = replace(cfg, limits=replace(cfg.limits, cpus=(core,)))
                samples.baseline_core.append(core)
            result = _checked(hook, cfg, argv, side)
            into.append(result.elapsed_s)
            cpu_into.append(result.cpu_s)
            if side == "baseline":
                baseline = result
        _drop_last(samples, gauge, baseline)
        block += 1
        if stop.enough(samples, started):
            return samples


def measure_array(*, hook: ModuleType, workers: int, baseline: ArrayRun, submission: ArrayRun,
                  rng: np.random.Generator, stop: StopRule, gauge: Gauge | None = None,
                  distinct: int | None = None) -> Samples:
    """Job arrays: each sample is one whole array's makespan (start-up included on both sides),
    the baseline's single task against the submission's tasks, with the CPU time of all their
    sandboxes; the gathered values (one per task) are checked each time. `distinct`
    (timing.inputs): the inputs drawn, then timed in turn; None: a fresh one each block."""
    samples = Samples(workers, windows=gauge.windows if gauge else None)
    started = time.monotonic()
    if gauge is not None:
        gauge.begin()
    block = 0
    drawn: list[dict[str, Any]] = []
    while True:
        if distinct is None:
            inputs = hook.make_input(rng, workers)
        else:
            if len(drawn) < distinct:
                drawn.append(hook.make_input(rng, workers))
            inputs = drawn[block % distinct]
        sides = [("baseline", baseline, samples.baseline, samples.baseline_cpu),
                 ("submission", submission, samples.submission, samples.submission_cpu)]
        if block % 2:
            sides.reverse()
        for side, run, into, cpu_into in sides:
            with blamed(side):
                result = run(inputs)
            judge(hook.check(inputs, result.values), side, "array")
            into.append(result.makespan_s)
            cpu_into.append(result.cpu_s)
        _drop_last(samples, gauge)
        block += 1
        if stop.enough(samples, started):
            return samples


def startups(assignment: Assignment, samples: list[Samples], *, executor: Executor,
             stage: Stage, cpus: list[int], gpu_mode: str, settings: RunnerSettings,
             script: bytes | None = None, program: str = ""
             ) -> tuple[Startup, dict[int, Startup]]:
    """Script entries: the baseline's start-up and the submission's at each worker count."""
    # MPI's initialisation belongs to its launcher's start-up (it costs 2 ranks ≈ 0.4 s here).
    m = assignment.manifest
    probe = b"from mpi4py import MPI\n" if m.launcher.kind in ("mpirun", "sbatch") else b""
    files = {m.entry.file: probe}
    if script is not None:  # the submission's own launch line, an empty program
        job = batchscript.parse(script.decode(errors="replace"), m.resources, {program})
        files = {m.entry.file: script, job.program: probe}
    empty = stage.add_code("empty", files)

    def one_side(workers: int, serial: bool) -> Startup:
        return startup(make_config(
            assignment, executor=executor, stage=stage, code_dir=empty, cpus=cpus,
            workers=workers, gpu_mode=gpu_mode, serial=serial, settings=settings))

    return one_side(1, True), {s.workers: one_side(s.workers, False) for s in samples}


def startup_note(figure: SpeedupFigure) -> str:
    """How much of each side's median time is start-up, in words."""
    sub, base = figure.startup_submission_s or 0.0, figure.startup_baseline_s or 0.0
    return (f"timed as whole programs; start-up (sandbox, launcher and interpreters running an "
            f"empty script; MPI's initialisation under mpirun) is {sub:.2f} s of your "
            f"{figure.submission_median_s:.2f} s median "
            f"({sub / figure.submission_median_s:.0%}) and {base:.2f} s of the baseline's "
            f"{figure.baseline_median_s:.2f} s ({base / figure.baseline_median_s:.0%}); busy "
            "cores and work ratio leave start-up out")


def work_note(figure: SpeedupFigure) -> str:
    """The note of a figure scored on the work after start-up (timing.startup = 'excluded')."""
    sub, base = figure.startup_submission_s or 0.0, figure.startup_baseline_s or 0.0
    return (f"scored on the work after start-up, as this assignment asks: each run's time less "
            f"its side's start-up (an empty script under the same launcher: {sub:.2f} s under "
            f"yours, {base:.2f} s under the baseline's; medians of {STARTUP_RUNS} runs, whose own "
            "spread the interval leaves out)")
