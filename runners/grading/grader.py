"""The grading pipeline: tests in the sandbox, timing against the baseline, points, one report."""

from __future__ import annotations

import contextlib
import importlib.util
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from runners import package
from runners.grading import environment, testrun
from runners.measure import (
    anchor,
    capacity,
    credit,
    devicework,
    placement,
    stats,
    stopping,
    timed_calls,
    whole_runs,
)
from runners.nodes import gang, hardware, overlay
from runners.package import Assignment
from runners.protocol import (
    Credit,
    GradeReport,
    Manifest,
    TestOutcome,
    TestResult,
    Verdict,
    credited_speedup,
    points,
)
from runners.runs import array, batchscript, configure, service, zygote
from runners.runs.failures import SubmissionFailure, SubmissionRaised
from runners.runs.runconfig import RunConfig
from runners.runs.stage import Stage
from runners.sandbox import Executor, create_executor
from runners.settings import RunnerSettings, get_settings

Progress = Callable[[str], None]
SIMULATED_NOTE = "simulated: no speedup points (numba CUDA simulator on a CPU-only runner)"


def _noop(_: str) -> None:
    pass


def load_hook(assignment: Assignment) -> ModuleType:
    """The package's timing hook (trusted instructor code): make_input(rng, workers), check()."""
    if assignment.manifest.service is not None:
        service.load(assignment)  # the hook checks answers against it
    path = assignment.hidden_dir / assignment.manifest.timing.hook
    spec = importlib.util.spec_from_file_location(
        f"paragrade_hook_{abs(hash(str(path)))}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if assignment.manifest.entry.style == "script":
        names: tuple[str, ...] = ("make_args", "check")
    else:
        names = ("make_input", "check")
    names += (
        ("make_weak_input",) if assignment.manifest.timing.weak_scaling else ())
    for name in names:
        if not callable(getattr(module, name, None)):
            raise ImportError(f"{path.name} defines no {name}()")
    if not callable(getattr(module, "make_warmup_input", callable)):  # optional, but a function
        raise ImportError(f"{path.name}: make_warmup_input is not a function")
    return module


def probes(gpu_mode: str, m: Manifest, settings: RunnerSettings) -> bool:
    """Whether timing probes the node's capacity around its windows (runners.measure.capacity): not on
    a real GPU (one side's sandbox at a time, kernels the probe cannot see), nor across nodes
    (the probe sees this node only), nor where the operator or the package turned it off (a
    speedup that does not depend on the cores: re-timing it would only cost time)."""
    return (settings.timing_probe and m.timing.probe and gpu_mode != "real"
            and m.resources.nodes == 1)


def can_pair(assignment: Assignment, executor: Executor, gpu_mode: str) -> bool:
    """Whether timing may keep both sides' sandboxes alive, the idle one frozen."""
    if not executor.sandboxed or gpu_mode == "real" or assignment.manifest.service is not None:
        # Unsandboxed sides share a uid and could reach each other; a freezer does not stop
        # kernels queued on a GPU; a trusted service is one slot pool both sides would share.
        return False
    return executor.can_freeze()


class _Laps:
    """Wall seconds of a grading's phases, for the report's environment (where the time went)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._phase, self._since = "set-up", time.monotonic()

    def start(self, phase: str) -> None:
        """The current phase ends; `phase` begins."""
        now = time.monotonic()
        self.seconds[self._phase] = self.seconds.get(self._phase, 0.0) + now - self._since
        self._phase, self._since = phase, now

    def table(self, timed_s: float) -> dict[str, float]:
        self.start(self._phase)
        out = {k: round(v, 3) for k, v in self.seconds.items()}
        if "timing" in out:
            out["timed calls"] = round(timed_s, 3)  # the part of "timing" the clock measured
        return out


def grade(assignment: Assignment, files: dict[str, bytes], *, backend: str | None = None,
          seed: int | None = None, with_timing: bool = True, progress: Progress = _noop,
          settings: RunnerSettings | None = None,
          reference_speedup: float | None = None,
          reference_test_s: dict[str, float] | None = None, timing_only: bool = False,
          timing_share: float = 1.0) -> GradeReport:
    """Grade one submission of `assignment` and return its report (never raises for its code).

    `reference_speedup`: the reference's, measured at validation: a function entry's figure is
    anchored to it (runners/measure/anchor.py), and a GPU package holds a speedup far above it for
    review; `reference_test_s`: its seconds per test there (per-test limits). `timing_only`: a
    final run's turn (the server vouches that this code passed this version's hidden tests), so
    no test runs and the report holds only the speedup, measured on `timing_share` of the budget
    (every timed answer is still checked)."""
    settings = settings or get_settings()
    started = time.monotonic()
    laps = _Laps()
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    seed = seed if seed is not None else secrets.randbits(48)
    m = assignment.manifest
    executor = create_executor(settings, backend)
    cpus, cpu_note = hardware.allotment(assignment)
    gpu_mode = hardware.decide_gpu_mode(assignment, settings)
    notes: list[str] = []
    if cpu_note:
        notes.append(cpu_note)
    if not executor.sandboxed:
        notes.append("UNSAFE: graded with the 'process' backend (no sandbox)")
    env = environment.environment(executor, cpus, gpu_mode, settings, executor.cpuset_enforced(),
                                  mpi=m.launcher.kind == "mpirun")
    timed_total = 0.0

    def report(verdict: Verdict, summary: str, tests: list[TestResult], *, output: str = "",
               speedup: Any = None, scaling: Any = (), weak: Any = (),
               earned: float | None = None, credit: Credit | None = None) -> GradeReport:
        weights = sum(t.weight for t in tests)
        passed = sum(t.weight for t in tests if t.outcome == TestOutcome.PASSED)
        test_points = m.scoring.test_points * (passed / weights if weights else 0.0)
        if verdict.fault != "student":
            test_points = 0.0
        kf = scaling[-1].karp_flatt if scaling else None
        amdahl = stats.amdahl_fit([(p.workers, p.speedup) for p in scaling]) if scaling else None
        graded = GradeReport(
            assignment=assignment.ref, assignment_version=m.version, verdict=verdict,
            summary=summary, tests=tests, score=0.0,
            max_score=m.scoring.test_points + m.scoring.performance_points,
            test_points=round(test_points, 2), performance_points=0.0,
            speedup=speedup, scaling=list(scaling), weak_scaling=list(weak), serial_fraction=kf,
            amdahl_serial_fraction=amdahl, credit=credit, notes=notes, output_excerpt=output[-16000:],
            seed=seed, environment=env.model_copy(update={"phases": laps.table(timed_total)}),
            started_at=started_at,
            wall_time_s=round(time.monotonic() - started, 3), timed_time_s=round(timed_total, 3),
        )
        total = points.score(graded, m.scoring, earned=earned)  # as the server stores it
        return graded.model_copy(update={"score": total, "performance_points": round(
            total - graded.test_points, 2)})

    if gpu_mode == "unavailable":
        return report(Verdict.PLATFORM_ERROR,
                      "needs a GPU runner: this runner has no GPU and the assignment cannot be "
                      "simulated; it was not graded (not counted against you)", [])
    if gpu_mode == "simulated":
        notes.append(SIMULATED_NOTE)
    why_not, nodes = hardware.gang_problem(assignment, executor, settings)
    if why_not is not None:
        return report(Verdict.PLATFORM_ERROR, f"needs a runner with {m.resources.nodes} nodes: "
                      f"{why_not}; it was not graded (not counted against you)", [])
    if nodes:
        env = env.model_copy(update={
            "nodes": [f"{n.name}: {n.hardware}" for n in nodes],
            "network": f"VXLAN overlay per run ({overlay.SUBNET}.0/24, no route elsewhere), "
                       "one sandbox per node"})

    stage = Stage(scratch=settings.scratch_dir)
    stack = contextlib.ExitStack()  # what timing holds open (the capacity probe)
    try:
        code_dir = stage.add_code("submission", files)
        if m.launcher.kind == "sbatch":
            try:
                job = configure.batch_job(assignment, code_dir)
            except batchscript.ScriptRefused as exc:
                return report(Verdict.FAILED, f"your batch script was not run: {exc}", [])
            notes.append(f"your batch script ran {job.program} as {job.tasks} MPI rank"
                         f"{'s' * (job.tasks > 1)} on {job.nodes} node{'s' * (job.nodes > 1)}")
            if unused := job.unused_note():
                notes.append(unused)
        tests: list[TestResult]
        if timing_only:
            tests, output, verdict = [], "", Verdict.PASSED
            summary = "timing only (a final run): the hidden tests passed in its grading"
        else:
            laps.start("tests")
            progress("running tests in the sandbox")
            tests, output = testrun.run_tests(assignment, code_dir, backend=executor.name,
                                              seed=seed, gpu_mode=gpu_mode, cpus=cpus,
                                              reference_test_s=reference_test_s)
            laps.start("report")
            verdict = testrun.overall_verdict(tests)
            hidden = [t for t in tests if t.hidden]
            n_ok = sum(t.outcome == TestOutcome.PASSED for t in hidden)
            summary = f"{n_ok}/{len(hidden)} hidden tests passed"
        if verdict != Verdict.PASSED:
            return report(verdict, f"{summary}; {testrun.next_step(verdict, tests)}", tests,
                          output=output)
        if not (with_timing and m.timing.enabled and m.scoring.performance_points > 0):
            return report(verdict, summary + "; speedup not measured", tests, output=output)
        if gpu_mode == "simulated":
            # The note says why; the headline only that (the page shows both).
            return report(verdict, summary + "; speedup not measured (simulated GPU)", tests,
                          output=output)
        script = m.entry.style == "script"
        if not script and m.entry.function is None:
            return report(verdict, summary + "; speedup not measured", tests, output=output)

        laps.start("timing")
        if assignment.data_dir is not None:
            stage.add_data(assignment.data_dir)
        base_dir = stage.add_code("baseline", package.code_of(assignment, "baseline"))
        # The reference beside the submission at the headline worker count, where its figure is
        # known: calls and whole programs; job arrays, batch scripts (the student's own launch
        # line) and ranks on several nodes are not anchored yet.
        anchor_to = (reference_speedup if settings.anchor and m.array is None
                     and m.launcher.kind != "sbatch" and m.resources.nodes == 1 else None)
        ref_dir = (stage.add_code("reference", package.code_of(assignment, "reference"))
                   if anchor_to is not None else None)
        if m.timing.note:
            notes.append(m.timing.note)
        hook = load_hook(assignment)
        rng = np.random.default_rng(seed)
        all_samples: list[stats.Samples] = []
        weak_samples: list[stats.Samples] = []
        counts = assignment.scaling_workers
        weak_counts = [k for k in counts if k > 1] if m.timing.weak_scaling else []
        if timing_only:  # a final run wants the headline figure alone: its share of the whole
            counts, weak_counts = [max(counts)], []  # budget goes to the top worker count
        # The operator's cap (PARAGRADE_TIMING_BUDGET_S) bounds the package's own budget.
        total = min(m.timing.budget_s, settings.timing_budget_s) * timing_share
        budget = total / (len(counts) + len(weak_counts))
        stops = stopping.stop_rules(m, budget, top=max(counts), weak_top=max(weak_counts, default=0),
                                    anchor_to=anchor_to)
        paired = can_pair(assignment, executor, gpu_mode)
        # Each call in a fresh process: the zygotes preload what each side's trusted code imports.
        fresh = ((zygote.preload_modules(package.code_of(assignment, "baseline")),
                  zygote.preload_modules(package.code_of(assignment, "reference")))
                 if m.timing.fresh_calls else None)
        probe = (stack.enter_context(capacity.CapacityProbe(cpus))
                 if probes(gpu_mode, m, settings) else None)
        watch = None
        if gpu_mode == "real":  # what each timed call did on the GPU, read through the driver
            watch, why = devicework.open_watch()
            if watch is None:
                notes.append(f"work on the GPU not measured: {why}")
            else:
                stack.callback(watch.close)

        def cfg(code: Path, workers: int, serial: bool) -> RunConfig:
            return configure.make_config(assignment, executor=executor, stage=stage, code_dir=code,
                                         cpus=cpus, workers=workers, gpu_mode=gpu_mode,
                                         serial=serial, settings=settings)

        def gauge(k: int) -> capacity.Gauge | None:
            """The node's capacity around each window of k workers' timing."""
            if probe is None:
                return None
            return capacity.Gauge(probe, len(cfg(code_dir, k, False).limits.cpus), budget)

        try:
            for k in counts:
                progress(f"timing with {k} worker{'s' * (k > 1)} against the baseline")

                if script:
                    # The baseline's sandbox gets the set's k cores, each run one of them in turn.
                    samples = whole_runs.measure_script(
                        hook=hook, workers=k, baseline_cfg=cfg(base_dir, k, True),
                        submission_cfg=cfg(code_dir, k, False), rng=rng, stop=stops(k),
                        gauge=gauge(k), place=settings.baseline_placement,
                        reference_cfg=cfg(ref_dir, k, False) if ref_dir and k == max(counts)
                        else None)
                    timed_total += (sum(samples.baseline) + sum(samples.submission)
                                    + sum(samples.reference))
                    all_samples.append(samples)
                    continue
                if m.array is not None:
                    samples = whole_runs.measure_array(
                        hook=hook, workers=k, rng=rng, stop=stops(k),
                        baseline=array.array_runner(assignment, cfg(base_dir, 1, True), 1, 1, settings),
                        submission=array.array_runner(assignment, cfg(code_dir, k, False),
                                                      m.array.tasks, k, settings), gauge=gauge(k))
                    timed_total += sum(samples.baseline) + sum(samples.submission)
                    all_samples.append(samples)
                    continue
                assert m.entry.function is not None
                samples = timed_calls.measure(
                    hook=hook, function=m.entry.function, workers=k,
                    workers_arg=m.entry.workers_arg,
                    baseline_cfg=cfg(base_dir, k, True), submission_cfg=cfg(code_dir, k, False),
                    rng=rng, stop=stops(k), paired=paired, on_progress=lambda s: progress(
                        f"timing with {s.workers} workers: {len(s.submission)} runs"),
                    gauge=gauge(k), watch=watch, place=settings.baseline_placement, fresh=fresh,
                    reference_cfg=cfg(ref_dir, k, False) if ref_dir and k == max(counts) else None)
                timed_total += sum(samples.baseline) + sum(samples.submission) + sum(samples.reference)
                all_samples.append(samples)
            for k in weak_counts:
                progress(f"weak scaling: {k} workers on a {k}× larger problem")
                assert m.entry.function is not None
                samples = timed_calls.measure_weak(
                    hook=hook, function=m.entry.function, workers=k,
                    workers_arg=m.entry.workers_arg, one_cfg=cfg(code_dir, 1, False),
                    many_cfg=cfg(code_dir, k, False), rng=rng, stop=stops(-k), paired=paired,
                    gauge=gauge(k), fresh=fresh[1] if fresh else None)
                timed_total += sum(samples.baseline) + sum(samples.submission)
                weak_samples.append(samples)
        except timed_calls.WrongTimedAnswer as exc:
            return report(Verdict.FAILED, str(exc), tests, output=output)
        except array.ArrayUnavailable as exc:
            return report(Verdict.PLATFORM_ERROR, f"the job array could not run: {exc}", tests,
                          output=output)
        except timed_calls.BaselineBroken as exc:
            return report(Verdict.AUTHOR_ERROR, str(exc), tests, output=output)
        except SubmissionFailure as exc:
            return report(exc.verdict, f"during timing: {exc.message}", tests,
                          output=output + exc.output)
        except SubmissionRaised as exc:
            return report(Verdict.CRASHED, f"during timing your code raised {exc}", tests,
                          output=output)
        laps.start("report")
        figure, scaling = stats.summarize(all_samples)
        weak = stats.summarize_weak(weak_samples)
        widest = max(all_samples, key=lambda x: x.workers)
        anchored_on = widest  # the work after start-up instead, where the package scores that
        for s in all_samples:
            if s.windows is not None and (said := s.windows.note()):
                notes.append(f"timing with {s.workers} worker{'s' * (s.workers > 1)}: {said}")
        if placed := placement.note(widest.baseline_core):
            notes.append(placed)
        if widest.windows is not None and (speeds := widest.windows.speeds_note()):
            notes.append(speeds)
        top_windows = widest.windows
        interfered = top_windows is not None and top_windows.unreliable
        if top_windows is not None:
            figure = figure.model_copy(update={"interference": top_windows.figure()})
        if script:
            progress("timing an empty script under each side's launcher (start-up)")
            laps.start("start-up runs")
            sbatch = m.launcher.kind == "sbatch"
            base_up, sub_up = whole_runs.startups(
                assignment, all_samples, executor=executor, stage=stage, cpus=cpus,
                gpu_mode=gpu_mode, settings=settings,
                script=files[m.entry.file] if sbatch else None,
                program=job.program if sbatch else "")
            laps.start("report")
            top_up = sub_up[scaling[-1].workers]
            figure = figure.model_copy(update={"startup_baseline_s": round(base_up.wall_s, 4),
                                               "startup_submission_s": round(top_up.wall_s, 4)})
            # Busy cores and work ratio of the code's own work: start-up left out on both sides.
            work, own = stats.summarize([whole_runs.without_startup(s, base_up, sub_up[s.workers])
                                         for s in all_samples])
            if m.timing.startup == "excluded":  # the package scores the work after start-up
                anchored_on = whole_runs.without_startup(widest, base_up, top_up)
                figure = work.model_copy(update={
                    "interference": figure.interference,
                    "startup_baseline_s": figure.startup_baseline_s,
                    "startup_submission_s": figure.startup_submission_s})
                scaling = own
                notes.append(whole_runs.work_note(figure))
            else:
                scaling = [p.model_copy(update={"cpu": o.cpu})
                           for p, o in zip(scaling, own, strict=True)]
                notes.append(whole_runs.startup_note(figure))
        if anchor_to is not None and (pinned := anchor.measure(anchored_on, anchor_to)) is not None:
            figure, scaling[-1] = anchor.apply(figure, scaling[-1], pinned)
            notes.append(anchor.note(pinned))
        if widest.paired and widest.reference:
            notes.append("timed in turns: the baseline's, the reference's and your sandboxes "
                         "alive together, calls alternating, the idle ones frozen (no CPU while "
                         "another side is timed)")
        elif any(s.paired for s in all_samples + weak_samples):
            notes.append("timed in pairs: both sandboxes alive, calls alternating, the idle one "
                         "frozen (no CPU while the other side is timed)")
        if m.resources.nodes > 1:
            scaling = [p.model_copy(update={"nodes": job.nodes if m.launcher.kind == "sbatch"
                                            else len(gang.placement(p.workers,
                                                                    m.resources.cores_per_node))})
                       for p in scaling]
            across = [p.workers for p in scaling if p.nodes > 1]
            if across:
                layouts = "; ".join(
                    f"{p.workers} rank{'s' * (p.workers > 1)}: " + gang.layout_text(
                        gang.placement(p.workers, m.resources.cores_per_node)) for p in scaling)
                notes.append(f"from {across[0]} ranks on, the ranks spanned several nodes and "
                             f"talked over the network: {layouts}")
        top = scaling[-1]
        judged = credit.decide(
            policy=m.scoring.credit, figure=figure, point=top,
            cores=min(top.workers, len(cpus) * top.nodes),
            reference_speedup=reference_speedup, reference_factor=m.scoring.reference_factor,
            gpu=gpu_mode == "real")
        summary += f"; speedup {figure.median:.2f}× (95 % CI {figure.ci_low:.2f}–{figure.ci_high:.2f})"
        if weak:
            summary += f"; weak-scaling efficiency {weak[-1].efficiency:.0%} at {weak[-1].workers}"
        if interfered:
            summary += "; measured while the node was short of cores: the speedup may be low"
        if judged.status == "held":
            summary += "; performance points held for review"
        elif judged.status == "refused":
            summary += "; no performance points: " + judged.reason
        elif judged.status == "capped":
            summary += f"; {judged.speedup:.2f}× of it earns points"
        if top.cpu is None and m.scoring.credit == "parallel" and gpu_mode != "real":
            notes.append("parallelism not measured: this runner cannot read the sandbox's CPU "
                         "time, so the speedup counts only up to the allotted cores")
        return report(verdict, summary, tests, output=output, speedup=figure, scaling=scaling,
                      weak=weak, earned=credited_speedup(judged, figure.median), credit=judged)
    except package.PackageError as exc:
        return report(Verdict.AUTHOR_ERROR, f"assignment package problem: {exc}", [])
    except (ImportError, SyntaxError) as exc:
        return report(Verdict.AUTHOR_ERROR, f"the assignment's timing hook failed: {exc}", [])
    finally:
        stack.close()
        stage.cleanup()
