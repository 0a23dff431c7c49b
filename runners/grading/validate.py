"""`paragrade assignments validate`: the reference passes, the starter does not, the baseline is right."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from runners import package
from runners.grading import grader, measuring, runaway, testrun
from runners.grading.state import Progress
from runners.measure import calibration, capacity
from runners.nodes import hardware
from runners.protocol import GradeReport, TestOutcome, TestResult, ValidationCheck, Verdict
from runners.runs import array, configure
from runners.runs.array import ArrayUnavailable
from runners.runs.failures import SubmissionFailure, SubmissionRaised
from runners.runs.launch import run_script
from runners.runs.session import Session
from runners.runs.stage import Stage
from runners.sandbox import create_executor
from runners.settings import RunnerSettings, get_settings


@dataclass
class Check:
    """One validation step and every problem it found."""

    name: str
    ok: bool
    problems: list[str] = field(default_factory=list)
    skipped: str | None = None
    report: GradeReport | None = None  # the reference's grading, when measured
    figure: float | None = None  # what it measured (the reference's speedup)
    test_seconds: dict[str, float] | None = None  # the reference's, per test

    def message(self) -> ValidationCheck:
        """The check as it crosses to the server (or is printed as JSON)."""
        return ValidationCheck(name=self.name, ok=self.ok, problems=self.problems,
                               skipped=self.skipped, figure=self.figure,
                               test_seconds=self.test_seconds)


BUSY_WAIT_S = 600.0
"""How long a check whose tests ran slow on a busy node waits for the node to free."""
OVERHEAD_GOAL_S = 2.0
"""Runner time a grading may spend beyond its timed runs (docs/contributors/benchmarks.md,
Platform overhead): every second past it is a second per submission, at every deadline."""
ANCHOR_ROUNDS = 3
"""Gradings of the reference whose median speedup anchored gradings scale by: every student's
figure moves with it, so one grading in a bad moment must not set it."""


def _failures(tests: list[TestResult], *, hidden_only: bool = False) -> list[str]:
    return [f"{t.name}: {t.outcome.value}: {t.message}" for t in tests
            if (t.outcome not in (TestOutcome.PASSED, TestOutcome.SKIPPED)
                or t.verdict is not Verdict.PASSED)  # not run (runners.grading.runaway)
            and (t.hidden or not hidden_only)]


def _check_starter(tests: list[TestResult]) -> Check:
    """The starter fails a hidden test, as a student's unfinished code: a failure the package
    blames on itself (`author_error`, e.g. an assertion about the submission's output made in a
    fixture) would tell every student with a mistake that the package is broken."""
    broken = [f"the starter's tests could not run ({t.name}: {t.message}): the platform's fault, "
              "not the package's; validate again" for t in tests if t.verdict is Verdict.PLATFORM_ERROR]
    if broken:
        return Check("starter fails", False, broken)
    failed = _failures(tests, hidden_only=True)
    if not failed:
        return Check("starter fails", False, ["the starter passes every hidden test"])
    blamed = [f"{t.name}: the starter's failure is reported as {t.verdict.value}, not as the "
              f"submission's ({t.message}); check what the submission did in the test, not in a "
              "fixture (a fixture's failure is the package's)" for t in tests
              if t.hidden and t.verdict is Verdict.AUTHOR_ERROR]
    return Check("starter fails", not blamed, blamed)


def validate(path: Path, *, backend: str | None = None, settings: RunnerSettings | None = None,
             progress: Progress = grader._noop, measure: bool = False) -> list[Check]:
    """Every check of a package; a failed load is the only check when the manifest is broken.

    `measure`: grade the reference in full (its speedup on this runner, against the scoring
    curve) instead of running its tests only; always on a real GPU, where the reference's
    speedup is what a submission's is compared with (scoring.reference_factor), and where
    gradings are anchored to the reference (`settings.anchor`), whose figure is then the median
    of ANCHOR_ROUNDS gradings (runners/measure/anchor.py)."""
    settings = settings or get_settings()
    try:
        a = package.load(path)
    except package.PackageError as exc:
        return [Check("manifest and files", False, [str(p) for p in exc.problems])]
    checks = [Check("manifest and files", True)]
    gpu_mode = hardware.decide_gpu_mode(a, settings)
    if gpu_mode == "unavailable":
        reason = "needs a GPU runner (this one has none and the package cannot be simulated)"
        return checks + [Check(n, True, skipped=reason) for n in
                         ("reference passes", "starter fails", "baseline is correct", "timing hook")]
    measure = measure or gpu_mode == "real" or settings.anchor
    executor = create_executor(settings, backend)
    cpus, _ = hardware.allotment(a)
    seed = int(np.random.default_rng().integers(2**40))
    stage = Stage(scratch=settings.scratch_dir)
    try:
        dirs = {role: stage.add_code(role, package.code_of(a, role))
                for role in ("reference", "starter", "baseline")}

        across_nodes = a.manifest.resources.nodes > 1

        def tests_of(role: str, *, hidden_only: bool = False,
                     first_failure: bool = False) -> list[TestResult]:
            progress(f"running the tests against the {role}")
            # A baseline across nodes runs as it is timed, one plain process (its copy on the
            # other node would have nothing to do); on one node as the tests run any code (t5's
            # check a file per rank, which its serial baseline writes under torchrun).
            tests, _ = testrun.run_tests(a, dirs[role], backend=executor.name, seed=seed,
                                         gpu_mode=gpu_mode, cpus=cpus, reveal=True,
                                         hidden_only=hidden_only, first_failure=first_failure,
                                         serial=role == "baseline" and across_nodes)
            return tests

        def reference_tests() -> tuple[list[TestResult], float]:
            """The reference's tests, and their wall time (what every grading spends on them)."""
            began = time.monotonic()
            return tests_of("reference"), time.monotonic() - began

        report, tests_wall = None, 0.0
        if measure:
            progress("grading the reference, speedup included")
            def regrade() -> GradeReport:
                return grader.grade(a, package.code_of(a, "reference"), backend=executor.name,
                                    seed=seed, settings=settings)
            report = _timed_on_a_free_node(regrade(), regrade, cpus, progress)
            ref = report.tests
        else:
            ref, tests_wall = reference_tests()
        checks.append(Check("reference passes", not _failures(ref) and bool(ref), _failures(ref)
                            or ([] if ref else ["no tests ran"]), report=report,
                            test_seconds={t.name: t.duration_s for t in ref
                                          if t.outcome is TestOutcome.PASSED}))
        timed = _check_tests_time(a, ref)
        if not timed.ok and capacity.busy_now(cpus):
            # Other work slowed the tests, not the package: the check waits for a free node
            # (and the package stays closed meanwhile) rather than failing it.
            progress("the node is busy: waiting for it to free before the reference's tests "
                     "run again")
            if not capacity.await_free(cpus, within_s=BUSY_WAIT_S):
                raise calibration.NodeBusy(
                    f"the reference's tests took {sum(t.duration_s for t in ref):.0f} s while "
                    f"other work kept the node busy, and it stayed busy for {BUSY_WAIT_S:.0f} s "
                    "more: the package's check is tried again later, not failed")
            ref, tests_wall = reference_tests()
            timed = _check_tests_time(a, ref)
        checks.append(timed)
        checks.append(_check_overhead(report, ref, tests_wall))
        if report is not None and report.speedup is not None:
            checks.append(_check_speedup(a, report, regrade, progress,
                                         rounds=ANCHOR_ROUNDS if settings.anchor else 1))
            checks.append(_check_credit(report))
        # The starter and the baseline are judged on the hidden tests only; one failure is
        # enough to tell a starter fails, so its run stops there. Tests that could not run
        # for the reference (a file that does not import) cannot judge them either.
        if broken := sorted(t.name for t in ref if t.verdict is Verdict.AUTHOR_ERROR):
            why = (f"the package's own tests failed to run for the reference ({', '.join(broken)}:"
                   " see \"reference passes\")")
            checks += [Check(n, True, skipped=why) for n in ("starter fails", "baseline is correct")]
        else:
            starter = tests_of("starter", hidden_only=True, first_failure=True)
            checks.append(_check_starter(starter))
            base = tests_of("baseline", hidden_only=True)
            checks.append(Check("baseline is correct", not _failures(base), _failures(base)))
        checks.append(_check_hook(a, stage, dirs, executor, cpus, gpu_mode, seed, settings))
    finally:
        stage.cleanup()
    return checks


def _timed_on_a_free_node(report: GradeReport, regrade: Callable[[], GradeReport],
                          cpus: list[int], progress: Progress) -> GradeReport:
    """The reference's grading, timed on a free node. One timed while the node stayed busy has
    no speedup of its own yet (its credit pending, as a student's would be): the check waits for
    the node to free and times it again; a node busy throughout keeps the package's check for
    later (NodeBusy), never fails it: a busy node settles no check, as it settles no grade."""
    if not _pending(report):
        return report
    progress("the node was busy while the reference was timed: waiting for it to free, then "
             "timing it again")
    if capacity.await_free(cpus, within_s=BUSY_WAIT_S) and not _pending(again := regrade()):
        return again
    raise calibration.NodeBusy(
        "the reference was timed while other work kept the node busy "
        f"({report.credit.reason if report.credit else ''}), and the node stayed busy: the "
        "package's check is tried again later, not failed")


def _pending(report: GradeReport) -> bool:
    return report.credit is not None and report.credit.status == "pending"


def _check_overhead(report: GradeReport | None, tests: list[TestResult], tests_wall: float
                    ) -> Check:
    """What a grading of this package spends beyond its timed runs, by part (a measured
    grading's phases; else the wall time of its tests, `tests_wall`, which every grading runs),
    and which part to make lighter where it is over the goal (assignments/README.md,
    Validation, says how). Told, never failed: a heavy package still grades. Its name stays
    within a check's 200 characters (ValidationCheck)."""
    ran = [t for t in tests if t.outcome is not TestOutcome.SKIPPED]
    phases = report.environment.phases if report is not None else {}
    if report is not None:
        tests_wall = phases.get("tests", 0.0)
    each = tests_wall / len(ran) if ran else 0.0
    lighter = f"the tests ({each:.2f} s each)"
    if "timing" not in phases:
        spent = tests_wall
        name = (f"grading overhead: its tests take {_secs(spent)} s of every grading ({len(ran)} "
                "tests)")
    else:
        assert report is not None
        parts = {"tests": phases.get("tests", 0.0),
                 "around timed calls": phases["timing"] - phases.get("timed calls", 0.0),
                 "start-up runs": phases.get("start-up runs", 0.0),
                 "set-up": phases.get("set-up", 0.0) + phases.get("report", 0.0)}
        spent = report.wall_time_s - report.timed_time_s
        shown = ", ".join(f"{k} {_secs(v)} s" for k, v in parts.items() if v >= 0.05)
        name = f"grading overhead: {_secs(spent)} s beyond the timed runs ({shown})"
        top = max(parts, key=lambda k: parts[k])
        if top != "tests":
            lighter = {"around timed calls": "the timed inputs' draws and checks",
                       "start-up runs": "the start-up runs", "set-up": "the set-up"}[top]
    if spent > OVERHEAD_GOAL_S:
        name += f"; over the {OVERHEAD_GOAL_S:g} s goal: make {lighter} lighter"
    return Check(name, True, figure=round(spent, 3))


def _secs(v: float) -> str:
    return f"{v:.1f}" if v < 100 else f"{v:.0f}"


def _check_tests_time(a: package.Assignment, tests: list[TestResult]) -> Check:
    """The reference's tests leave a submission room within the grading's test budget
    (runners.grading.runaway): they may take at most half of it."""
    spent = sum(t.duration_s for t in tests)
    budget = runaway.tests_budget_s(a.manifest.resources)
    name = f"tests fit their time budget (the reference's took {spent:.0f} s of {budget:g} s)"
    if spent <= budget / 2:
        return Check(name, True)
    return Check(name, False, [
        f"the reference's tests took {spent:.1f} s, more than half of the {budget:g} s a "
        "grading's tests may take: raise resources.tests_seconds, or make the tests lighter"])


def _check_speedup(a: package.Assignment, report: GradeReport,
                   regrade: Callable[[], GradeReport], progress: Progress,
                   rounds: int = 1) -> Check:
    """The reference's speedup beats `scoring.speedup_min`. A shared machine can take a core
    away for a whole timed block, so a figure at or below it is measured once more before the
    check fails; both figures are shown. `rounds` > 1: the figure is the median of that many
    gradings (each shown), the one anchored gradings scale by."""
    low = a.manifest.scoring.speedup_min
    assert report.speedup is not None
    figures = [report.speedup.median]
    if rounds > 1:
        for i in range(2, rounds + 1):
            progress(f"measuring the reference's speedup again ({i} of {rounds})")
            again = regrade()
            if again.speedup is not None:  # a grading that failed before timing adds nothing
                figures.append(again.speedup.median)
        mid = float(statistics.median(figures))
        shown = ", ".join(f"{f:.2f}×" for f in figures)
        return Check(f"reference speeds up ({shown} here; median {mid:.2f}×)", mid > low,
                     [] if mid > low else [
                         f"the median {mid:.2f}× is not above scoring.speedup_min ({low}): the "
                         "reference would earn no performance points"], figure=mid)
    if figures[0] <= low:
        progress(f"the reference reached only {figures[0]:.2f}×: measuring it once more")
        again = regrade()
        if again.speedup is None:  # the second grading failed before its speedup
            return Check(f"reference speeds up ({figures[0]:.2f}× here)", False, [
                f"measured again after {figures[0]:.2f}×, the reference got no speedup: "
                f"{again.summary}"])
        figures.append(again.speedup.median)
    shown = ", then ".join(f"{f:.2f}×" for f in figures)
    ok = figures[-1] > low
    return Check(f"reference speeds up ({shown} here)", ok, [] if ok else [
        f"{shown} is not above scoring.speedup_min ({low}): the reference would earn no "
        "performance points"], figure=figures[-1])


def _check_credit(report: GradeReport) -> Check:
    """The reference's own speedup passes the package's credit policy (scoring.credit): its
    parallelism and work ratio are shown; a reference the policy holds or refuses means students'
    honest solutions would be treated alike."""
    credit = report.credit
    cpu = report.scaling[-1].cpu if report.scaling else None
    figures = ("parallelism not measured" if cpu is None else
               f"{cpu.parallelism:.2f} busy cores (baseline {cpu.baseline_parallelism:.2f}), "
               f"work ratio {cpu.work_ratio:.2f}")
    if credit is None:
        return Check(f"reference's speedup is credited ({figures})", True)
    ok = credit.status in ("credited", "capped")  # capped: noise, or parallelism explains less
    return Check(f"reference's speedup is credited under credit = \"{credit.policy}\" ({figures})",
                 ok, [] if ok else [
                     f"the reference's own speedup is {credit.status}: {credit.reason}; set "
                     "scoring.credit = \"any\" if the speedup this task rewards is not parallel "
                     "execution (I/O overlap, algorithmic gains), or fix the reference"])


def _check_hook(a: package.Assignment, stage: Stage, dirs: dict[str, Path], executor: object,
                cpus: list[int], gpu_mode: str, seed: int, settings: RunnerSettings) -> Check:
    m = a.manifest
    script = m.entry.style == "script"
    if not m.timing.enabled or (not script and m.entry.function is None):
        return Check("timing hook", True, skipped="timing is off for this package")
    try:
        hook = measuring.load_hook(a)
    except (ImportError, SyntaxError) as exc:
        return Check("timing hook", False, [str(exc)])
    if a.data_dir is not None:
        stage.add_data(a.data_dir)
    problems = []
    rng = np.random.default_rng(seed)
    # Under the CUDA simulator only the (CPU) baseline can take the full-size timed input.
    for role in ("baseline",) if gpu_mode == "simulated" else ("baseline", "reference"):
        cfg = configure.make_config(a, executor=executor, stage=stage,  # type: ignore[arg-type]
                                    code_dir=dirs[role], cpus=cpus, workers=a.workers,
                                    gpu_mode=gpu_mode, serial=role == "baseline", settings=settings)
        extra = {m.entry.workers_arg: a.workers} if m.entry.workers_arg else {}
        if script:  # one whole timed run of each side, checked as timing checks it
            argv = [str(x) for x in hook.make_args(rng, a.workers)]
            try:
                problem = hook.check(argv, run_script(cfg, argv))
                if problem:
                    problems.append(f"{role}: the timed run's output fails the check: {problem}")
            except (SubmissionFailure, SubmissionRaised) as exc:
                problems.append(f"{role}: the timed run failed: {exc}")
            continue
        inputs = [("timed", hook.make_input(rng, a.workers))]
        if hasattr(hook, "make_warmup_input") and m.array is None:
            inputs.append(("warm-up", hook.make_warmup_input(rng, a.workers)))
        if m.timing.weak_scaling and role == "reference":
            inputs.append(("weak-scaling", hook.make_weak_input(rng, a.workers)))
        for what, kwargs in inputs:
            try:
                if m.array is not None:  # the baseline as one task, the reference as the array
                    result = array.array_runner(
                        a, cfg, 1 if role == "baseline" else m.array.tasks,
                        1 if role == "baseline" else a.workers, settings)(kwargs)
                    value, secs = result.values, result.makespan_s
                else:
                    assert m.entry.function is not None
                    with Session(cfg) as session:
                        value, secs = session.call(m.entry.function, **kwargs, **extra)
                problem = hook.check(kwargs, value)
                if problem:
                    problems.append(f"{role}: the {what} input's answer fails the check: {problem}")
                elif role == "baseline" and what == "timed" and secs < 0.05:
                    problems.append(f"baseline: a timed input takes only {secs * 1000:.1f} ms; "
                                    "make it ≥ 50 ms so that speedups can be measured")
            except (SubmissionFailure, SubmissionRaised, ArrayUnavailable) as exc:
                problems.append(f"{role}: a {what} input failed: {exc}")
    return Check("timing hook", not problems, problems)
