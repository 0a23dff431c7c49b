"""The grading pipeline: tests in the sandbox, timing against the baseline, points, one report."""

from __future__ import annotations

import contextlib
import secrets
from pathlib import Path
from typing import Literal

from runners import package
from runners.grading import environment, testrun
from runners.grading.measuring import Figures, Timing, figures, measure
from runners.grading.practice import PRACTICE_SHARE, practice_report, profiled_call
from runners.grading.state import Grading, Progress
from runners.measure import (
    credit,
)
from runners.nodes import hardware, overlay
from runners.package import Assignment
from runners.protocol import (
    Credit,
    GradeReport,
    Practice,
    Profile,
    SpeedupFigure,
    TestOutcome,
    Verdict,
)
from runners.protocol.report import BUSY_BASELINE_WAITING, BUSY_PROBE_WAITING
from runners.runs import batchscript, configure
from runners.runs.stage import Stage
from runners.sandbox import create_executor
from runners.settings import RunnerSettings, get_settings

SIMULATED_NOTE = "simulated: no speedup points (numba CUDA simulator on a CPU-only runner)"


def _noop(_: str) -> None:
    pass


def grade(assignment: Assignment, files: dict[str, bytes], *, backend: str | None = None,
          seed: int | None = None, with_timing: bool = True, progress: Progress = _noop,
          settings: RunnerSettings | None = None,
          reference_speedup: float | None = None,
          reference_test_s: dict[str, float] | None = None, timing_only: bool = False,
          timing_share: float = 1.0, practice: Practice | None = None,
          profile: bool = False) -> GradeReport:
    """Grade one submission of `assignment` and return its report (never raises for its code).

    The stages: where it can run (`_start`), its tests (`_run_tests`), whether it is timed
    (`_untimed`), timing against the baseline (`Timing`, `measure`), the figures
    (`figures`), then credit and points (`_credited`).

    `reference_speedup`: the reference's, measured at validation: a function entry's figure is
    anchored to it (runners/measure/anchor.py), and a GPU package holds a speedup far above it for
    review; `reference_test_s`: its seconds per test there (per-test limits). `timing_only`: a
    final run's turn (the server vouches that this code passed this version's hidden tests), so
    no test runs and the report holds only the speedup, measured on `timing_share` of the budget
    (every timed answer is still checked). `practice`: a practice run, never graded
    (runners/grading/practice.py): the public tests only, and with `timed` one short timing at
    the top worker count; its report says so and carries no points. `profile` adds where the
    time of one untimed call went (runners/measure/profile.py): a practice run's, or a graded
    grading's after its timing (never a final run's turn); its cost is in the profile."""
    if practice is not None:
        timing_only, timing_share = practice == "timed", PRACTICE_SHARE
        with_timing = practice == "timed"
    report = _grade(assignment, files, backend=backend, seed=seed, with_timing=with_timing,
                    progress=progress, settings=settings, reference_speedup=reference_speedup,
                    reference_test_s=reference_test_s, timing_only=timing_only,
                    timing_share=timing_share, public_only=practice is not None,
                    profile=profile and (practice is not None or not timing_only))
    return practice_report(report) if practice is not None else report


def _grade(assignment: Assignment, files: dict[str, bytes], *, backend: str | None,
           seed: int | None, with_timing: bool, progress: Progress,
           settings: RunnerSettings | None, reference_speedup: float | None,
           reference_test_s: dict[str, float] | None, timing_only: bool, timing_share: float,
           public_only: bool, profile: bool = False) -> GradeReport:
    g = _start(assignment, settings or get_settings(), backend=backend, progress=progress,
               seed=seed if seed is not None else secrets.randbits(48))
    if (cannot := _cannot_run_here(g)) is not None:
        return cannot
    stage = Stage(scratch=g.settings.scratch_dir)
    stack = contextlib.ExitStack()  # what timing holds open (the capacity probe)
    try:
        code_dir = stage.add_code("submission", files)
        if (refused := _batch_job(g, code_dir)) is not None:
            return refused
        verdict = _run_tests(g, code_dir, timing_only=timing_only and not public_only,
                             reference_test_s=reference_test_s, public_only=public_only)
        report = _untimed(g, verdict, with_timing=with_timing)
        if report is None:
            timing = Timing(g, stage, code_dir, stack, reference_speedup=reference_speedup,
                            timing_only=timing_only, timing_share=timing_share)
            measured = measure(timing)
            report = measured if isinstance(measured, GradeReport) else _credited(
                g, figures(timing, *measured, files=files), reference_speedup=reference_speedup)
        if profile and report.verdict is Verdict.PASSED:
            report = _with_profile(report, profiled_call(g, stage, code_dir, files))
        return report
    except package.PackageError as exc:
        return g.report(Verdict.AUTHOR_ERROR, f"assignment package problem: {exc}", [])
    except (ImportError, SyntaxError) as exc:
        return g.report(Verdict.AUTHOR_ERROR, f"the assignment's timing hook failed: {exc}", [])
    finally:
        stack.close()
        stage.cleanup()


def _with_profile(report: GradeReport, p: Profile) -> GradeReport:
    """`report` with its profile, whose runner time is a phase of the grading's wall time."""
    cost = p.cost_s or 0.0
    env = report.environment.model_copy(update={"phases": {**report.environment.phases,
                                                           "profile": round(cost, 4)}})
    return report.model_copy(update={"profile": p, "environment": env,
                                     "wall_time_s": round(report.wall_time_s + cost, 4)})


def _start(assignment: Assignment, settings: RunnerSettings, *, backend: str | None,
           progress: Progress, seed: int) -> Grading:
    """Stage 1: where the grading runs: the sandbox backend, the cores, the GPU mode, the
    environment."""
    m = assignment.manifest
    executor = create_executor(settings, backend)
    cpus, cpu_note = hardware.allotment(assignment)
    gpu_mode = hardware.decide_gpu_mode(assignment, settings)
    env = environment.environment(executor, cpus, gpu_mode, settings, executor.cpuset_enforced(),
                                  mpi=m.launcher.kind == "mpirun")
    g = Grading(assignment=assignment, settings=settings, executor=executor, cpus=cpus,
                 gpu_mode=gpu_mode, seed=seed, env=env, progress=progress)
    if cpu_note:
        g.notes.append(cpu_note)
    if not executor.sandboxed:
        g.notes.append("UNSAFE: graded with the 'process' backend (no sandbox)")
    return g


def _cannot_run_here(g: Grading) -> GradeReport | None:
    """A platform error where this runner cannot grade the package (no GPU, too few nodes)."""
    m = g.m
    if g.gpu_mode == "unavailable":
        return g.report(Verdict.PLATFORM_ERROR,
                        "needs a GPU runner: this runner has no GPU and the assignment cannot be "
                        "simulated; it was not graded (not counted against you)", [])
    if g.gpu_mode == "simulated":
        g.notes.append(SIMULATED_NOTE)
    why_not, nodes = hardware.gang_problem(g.assignment, g.executor, g.settings)
    if why_not is not None:
        return g.report(Verdict.PLATFORM_ERROR, f"needs a runner with {m.resources.nodes} "
                        f"nodes: {why_not}; it was not graded (not counted against you)", [])
    if nodes:
        g.env = g.env.model_copy(update={
            "nodes": [f"{n.name}: {n.hardware}" for n in nodes],
            "network": f"VXLAN overlay per run ({overlay.SUBNET}.0/24, no route elsewhere), "
                       "one sandbox per node"})
    return None


def _batch_job(g: Grading, code_dir: Path) -> GradeReport | None:
    """A batch script's job, read from the student's script (refused: the report says why)."""
    if g.m.launcher.kind != "sbatch":
        return None
    try:
        job = configure.batch_job(g.assignment, code_dir)
    except batchscript.ScriptRefused as exc:
        return g.report(Verdict.FAILED, f"your batch script was not run: {exc}", [])
    g.job = job
    g.notes.append(f"your batch script ran {job.program} as {job.tasks} MPI rank"
                   f"{'s' * (job.tasks > 1)} on {job.nodes} node{'s' * (job.nodes > 1)}")
    if unused := job.unused_note():
        g.notes.append(unused)
    return None


def _run_tests(g: Grading, code_dir: Path, *, timing_only: bool,
               reference_test_s: dict[str, float] | None, public_only: bool = False) -> Verdict:
    """Stage 2: the tests in the sandbox (none in a final run's turn, the public ones alone in
    a practice run); their verdict."""
    if timing_only:
        g.summary = "timing only (a final run): the hidden tests passed in its grading"
        return Verdict.PASSED
    g.laps.start("tests")
    g.progress("running tests in the sandbox")
    g.tests, g.output = testrun.run_tests(g.assignment, code_dir, backend=g.executor.name,
                                          seed=g.seed, gpu_mode=g.gpu_mode, cpus=g.cpus,
                                          reference_test_s=reference_test_s,
                                          public_only=public_only)
    g.laps.start("report")
    counted = [t for t in g.tests if t.hidden != public_only]
    n_ok = sum(t.outcome == TestOutcome.PASSED for t in counted)
    g.summary = f"{n_ok}/{len(counted)} {'public' if public_only else 'hidden'} tests passed"
    return testrun.overall_verdict(g.tests)


def _untimed(g: Grading, verdict: Verdict, *, with_timing: bool) -> GradeReport | None:
    """The report of a grading that ends with its tests: failed, or nothing to time."""
    m = g.m
    if verdict != Verdict.PASSED:
        return g.report(verdict, f"{g.summary}; {testrun.next_step(verdict, g.tests)}")
    if not (with_timing and m.timing.enabled and m.scoring.performance_points > 0):
        return g.report(verdict, g.summary + "; speedup not measured")
    if g.gpu_mode == "simulated":
        # The note says why; the headline only that (the page shows both).
        return g.report(verdict, g.summary + "; speedup not measured (simulated GPU)")
    if m.entry.style != "script" and m.entry.function is None:
        return g.report(verdict, g.summary + "; speedup not measured")
    return None


def busy_credit(figure: SpeedupFigure, policy: Literal["parallel", "any"]) -> Credit:
    """The credit of a figure timed while the node stayed busy: none yet, pending a timing on a
    free node (the tests' points count at once)."""
    seen = figure.interference
    assert seen is not None
    what = f"{seen.short} of {seen.windows} timed windows found the node short of cores"
    if seen.delivered is not None:
        what += f" ({seen.delivered:.1f} of {seen.cores} delivered)"
    if (seen.waiting or 0) > BUSY_PROBE_WAITING:
        what += f", its probes waited for a CPU {seen.waiting:.0%} of their time"
    if (seen.baseline_waiting or 0) > BUSY_BASELINE_WAITING:
        what += (f", the serial baseline waited for one {seen.baseline_waiting:.0%} of its "
                 "timed calls")
    return Credit(policy=policy, status="pending", speedup=0.0, measured=False, reason=(
        f"the node was busy while you were timed: {what}; a busy node's speedup is not yours, "
        "so your performance points wait for a timing on a free node"))


def _credited(g: Grading, f: Figures, *, reference_speedup: float | None) -> GradeReport:
    """Stage 5: the credit rule on the headline figure, then points (in the report)."""
    m, figure, top = g.m, f.figure, f.scaling[-1]
    judged = credit.decide(
        policy=m.scoring.credit, figure=figure, point=top,
        cores=min(top.workers, len(g.cpus) * top.nodes),
        reference_speedup=reference_speedup, reference_factor=m.scoring.reference_factor,
        gpu=g.gpu_mode == "real")
    busy = (f.interfered and g.settings.busy_node == "wait"
            and not credit.stands_on_a_busy_node(judged, top))
    if busy:
        judged = busy_credit(figure, m.scoring.credit)
    summary = (f"{g.summary}; speedup {figure.median:.2f}× "
               f"(95 % CI {figure.ci_low:.2f}–{figure.ci_high:.2f})")
    if f.weak:
        summary += f"; weak-scaling efficiency {f.weak[-1].efficiency:.0%} at {f.weak[-1].workers}"
    if busy:
        summary += "; performance points pending: the node was busy while it was timed"
    elif f.interfered and g.settings.busy_node == "time-anyway":
        summary += ("; timed on a busy node (this runner times anyway): the speedup may be off "
                    "and earned points as measured")
    elif f.interfered:  # a verdict no busy node explains (less work; held for a person)
        summary += "; timed on a busy node"
    if judged.status == "held":
        summary += "; performance points held for review"
    elif judged.status == "refused":
        summary += "; no performance points: " + judged.reason
    elif judged.status == "capped":
        summary += f"; {judged.speedup:.2f}× of it earns points"
    if top.cpu is None and m.scoring.credit == "parallel" and g.gpu_mode != "real":
        g.notes.append("parallelism not measured: this runner cannot read the sandbox's CPU "
                       "time, so the speedup counts only up to the allotted cores")
    return g.report(Verdict.PASSED, summary, speedup=figure, scaling=f.scaling, weak=f.weak,
                    credit=judged)
