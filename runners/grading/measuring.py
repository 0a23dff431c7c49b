"""Stages 3 and 4 of a grading: timing against the baseline (the set-up, every worker count's
samples in one loop) and the figures made of them (start-up, anchoring, the notes on how)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from runners import package
from runners.grading.state import Grading
from runners.measure import (
    anchor,
    calibration,
    capacity,
    devicework,
    placement,
    stats,
    stopping,
    timed_calls,
    whole_runs,
)
from runners.nodes import gang
from runners.package import Assignment
from runners.protocol import GradeReport, Manifest, Verdict, timed_on_a_busy_node
from runners.runs import array, authored, configure, service, zygote
from runners.runs.failures import SubmissionFailure, SubmissionRaised
from runners.runs.runconfig import RunConfig
from runners.runs.stage import Stage
from runners.sandbox import Executor
from runners.settings import RunnerSettings


def load_hook(assignment: Assignment) -> ModuleType:
    """The package's timing hook (trusted instructor code): make_input(rng, workers), check()."""
    if assignment.manifest.service is not None:
        service.load(assignment)  # the hook checks answers against it
    path = assignment.hidden_dir / assignment.manifest.timing.hook
    module = authored.load_module(f"paragrade_hook_{abs(hash(str(path)))}", path, assignment.root)
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


class Timing:
    """Stage 3's set-up: both sides' code, the hook, the worker counts, their stop rules and
    budget, and what each measurement runs under (pairs, fresh calls, the capacity probe, the
    GPU watch)."""

    def __init__(self, g: Grading, stage: Stage, code_dir: Path, stack: contextlib.ExitStack,
                 *, reference_speedup: float | None, timing_only: bool,
                 timing_share: float) -> None:
        a, m, settings = g.assignment, g.m, g.settings
        g.laps.start("timing")
        self.g, self.stage, self.code_dir = g, stage, code_dir
        if a.data_dir is not None:
            stage.add_data(a.data_dir)
        self.base_dir = stage.add_code("baseline", package.code_of(a, "baseline"))
        # The reference beside the submission at the headline worker count, where its figure is
        # known: calls and whole programs, on one node or several (a batch script's reference
        # runs as the reference's own script says, on the same nodes); job arrays are not
        # anchored yet.
        self.anchor_to = (reference_speedup if settings.anchor and m.array is None else None)
        self.ref_dir = (stage.add_code("reference", package.code_of(a, "reference"))
                        if self.anchor_to is not None else None)
        if m.timing.note:
            g.notes.append(m.timing.note)
        self.hook = load_hook(a)
        self.rng = np.random.default_rng(g.seed)
        counts = a.scaling_workers
        weak_counts = [k for k in counts if k > 1] if m.timing.weak_scaling else []
        if timing_only:  # a final run wants the headline figure alone: its share of the whole
            counts, weak_counts = [max(counts)], []  # budget goes to the top worker count
        self.counts, self.weak_counts = counts, weak_counts
        # The operator's cap (PARAGRADE_TIMING_BUDGET_S) bounds the package's own budget.
        total = min(m.timing.budget_s, settings.timing_budget_s) * timing_share
        self.budget = total / (len(counts) + len(weak_counts))
        self.stops = stopping.stop_rules(m, self.budget, top=max(counts),
                                         weak_top=max(weak_counts, default=0),
                                         anchor_to=self.anchor_to)
        self.paired = can_pair(a, g.executor, g.gpu_mode)
        # Each call in a fresh process: the zygotes preload what each side's trusted code imports.
        self.fresh = ((zygote.preload_modules(package.code_of(a, "baseline")),
                       zygote.preload_modules(package.code_of(a, "reference")))
                      if m.timing.fresh_calls else None)
        self.probe = (stack.enter_context(capacity.CapacityProbe(
            g.cpus, calibration=calibration.load(settings.calibration_file)))
            if probes(g.gpu_mode, m, settings) else None)
        self.watch = None
        if g.gpu_mode == "real":  # what each timed call did on the GPU, read through the driver
            self.watch, why = devicework.open_watch()
            if self.watch is None:
                g.notes.append(f"work on the GPU not measured: {why}")
            else:
                stack.callback(self.watch.close)

    def cfg(self, code: Path, workers: int, serial: bool) -> RunConfig:
        g = self.g
        return configure.make_config(g.assignment, executor=g.executor, stage=self.stage,
                                     code_dir=code, cpus=g.cpus, workers=workers,
                                     gpu_mode=g.gpu_mode, serial=serial, settings=g.settings)

    def gauge(self, k: int) -> capacity.Gauge | None:
        """The node's capacity around each window of k workers' timing."""
        if self.probe is None:
            return None
        return capacity.Gauge(self.probe, len(self.cfg(self.code_dir, k, False).limits.cpus),
                              self.budget)

    def reference_cfg(self, k: int) -> RunConfig | None:
        """The reference's run, beside the submission at the headline worker count only."""
        if self.ref_dir is None or k != max(self.counts):
            return None
        return self.cfg(self.ref_dir, k, False)

    def strong(self, k: int) -> stats.Samples:
        """k workers against the baseline: whole programs, a job array, or timed calls."""
        a, m, g = self.g.assignment, self.g.m, self.g
        if m.entry.style == "script":
            # The baseline's sandbox gets the set's k cores, each run one of them in turn.
            return whole_runs.measure_script(
                hook=self.hook, workers=k, baseline_cfg=self.cfg(self.base_dir, k, True),
                submission_cfg=self.cfg(self.code_dir, k, False), rng=self.rng,
                stop=self.stops(k), gauge=self.gauge(k), place=g.settings.baseline_placement,
                reference_cfg=self.reference_cfg(k))
        if m.array is not None:
            return whole_runs.measure_array(
                hook=self.hook, workers=k, rng=self.rng, stop=self.stops(k),
                baseline=array.array_runner(a, self.cfg(self.base_dir, 1, True), 1, 1,
                                            g.settings),
                submission=array.array_runner(a, self.cfg(self.code_dir, k, False),
                                              m.array.tasks, k, g.settings), gauge=self.gauge(k),
                distinct=m.timing.inputs)
        assert m.entry.function is not None
        return timed_calls.measure(
            hook=self.hook, function=m.entry.function, workers=k,
            workers_arg=m.entry.workers_arg, baseline_cfg=self.cfg(self.base_dir, k, True),
            submission_cfg=self.cfg(self.code_dir, k, False), rng=self.rng, stop=self.stops(k),
            paired=self.paired, on_progress=lambda s: g.progress(
                f"timing with {s.workers} workers: {len(s.submission)} runs"),
            gauge=self.gauge(k), watch=self.watch, place=g.settings.baseline_placement,
            fresh=self.fresh, reference_cfg=self.reference_cfg(k))

    def weak(self, k: int) -> stats.Samples:
        """k workers on a k times larger problem against one worker on the one-worker size."""
        m = self.g.m
        assert m.entry.function is not None
        return timed_calls.measure_weak(
            hook=self.hook, function=m.entry.function, workers=k,
            workers_arg=m.entry.workers_arg, one_cfg=self.cfg(self.code_dir, 1, False),
            many_cfg=self.cfg(self.code_dir, k, False), rng=self.rng, stop=self.stops(-k),
            paired=self.paired, gauge=self.gauge(k), fresh=self.fresh[1] if self.fresh else None)


def measure(t: Timing) -> tuple[list[stats.Samples], list[stats.Samples]] | GradeReport:
    """Stage 3: every worker count's samples, strong then weak (the loop written once), or the
    report of a timing that went wrong (its verdict says whose fault)."""
    g = t.g
    strong: list[stats.Samples] = []
    weak: list[stats.Samples] = []
    plan = [(k, t.strong, strong, f"timing with {k} worker{'s' * (k > 1)} against the baseline")
            for k in t.counts]
    plan += [(k, t.weak, weak, f"weak scaling: {k} workers on a {k}× larger problem")
             for k in t.weak_counts]
    try:
        for k, measure_k, into, said in plan:
            g.progress(said)
            samples = measure_k(k)
            g.timed_total += sum(samples.baseline) + sum(samples.submission) + sum(
                samples.reference)
            into.append(samples)
    except timed_calls.WrongTimedAnswer as exc:
        return g.report(Verdict.FAILED, str(exc))
    except array.ArrayUnavailable as exc:
        return g.report(Verdict.PLATFORM_ERROR, f"the job array could not run: {exc}")
    except timed_calls.BaselineBroken as exc:
        return g.report(Verdict.AUTHOR_ERROR, str(exc))
    except SubmissionFailure as exc:
        return g.report(exc.verdict, f"during timing: {exc.message}", output=g.output + exc.output)
    except SubmissionRaised as exc:
        return g.report(Verdict.CRASHED, f"during timing your code raised {exc}")
    return strong, weak


@dataclass
class Figures:
    """Stage 3's outcome: the headline figure, the scaling curves and whether the node was
    short of cores while the headline was timed."""

    figure: Any
    scaling: list[Any]
    weak: list[Any]
    interfered: bool


def figures(t: Timing, all_samples: list[stats.Samples],
             weak_samples: list[stats.Samples], *, files: dict[str, bytes]) -> Figures:
    """Stage 4: the figures from the samples, start-up taken out of whole programs where the
    package says so, anchored to the reference where it was timed beside, and the notes that
    say how they were measured."""
    g = t.g
    m, notes = g.m, g.notes
    g.laps.start("report")
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
    if top_windows is not None:
        figure = figure.model_copy(update={"interference": top_windows.figure()})
    interfered = timed_on_a_busy_node(figure)
    if m.entry.style == "script":
        figure, scaling, anchored_on = startup(t, all_samples, figure, scaling, files=files)
    if t.anchor_to is not None and (pinned := anchor.measure(anchored_on, t.anchor_to)) is not None:
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
        job = g.job
        scaling = [p.model_copy(update={"nodes": job.nodes if job is not None
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
    return Figures(figure=figure, scaling=scaling, weak=weak, interfered=interfered)


def startup(t: Timing, all_samples: list[stats.Samples], figure: Any,
             scaling: list[Any], *, files: dict[str, bytes]) -> tuple[Any, list[Any],
                                                                     stats.Samples]:
    """Whole programs: each side's start-up timed apart (an empty script under its launcher);
    busy cores and work ratio without it, and the figure too where the package scores the work
    after start-up. Returns the figure, the scaling points and the samples to anchor on."""
    g = t.g
    m = g.m
    widest = max(all_samples, key=lambda x: x.workers)
    g.progress("timing an empty script under each side's launcher (start-up)")
    g.laps.start("start-up runs")
    job = g.job
    base_up, sub_up = whole_runs.startups(
        g.assignment, all_samples, executor=g.executor, stage=t.stage, cpus=g.cpus,
        gpu_mode=g.gpu_mode, settings=g.settings,
        script=files[m.entry.file] if job is not None else None,
        program=job.program if job is not None else "")
    g.laps.start("report")
    top_up = sub_up[scaling[-1].workers]
    figure = figure.model_copy(update={"startup_baseline_s": round(base_up.wall_s, 4),
                                       "startup_submission_s": round(top_up.wall_s, 4)})
    # Busy cores and work ratio of the code's own work: start-up left out on both sides.
    work, own = stats.summarize([whole_runs.without_startup(s, base_up, sub_up[s.workers])
                                 for s in all_samples])
    if m.timing.startup == "excluded":  # the package scores the work after start-up
        figure = work.model_copy(update={
            "interference": figure.interference,
            "startup_baseline_s": figure.startup_baseline_s,
            "startup_submission_s": figure.startup_submission_s})
        g.notes.append(whole_runs.work_note(figure))
        return figure, own, whole_runs.without_startup(widest, base_up, top_up)
    g.notes.append(whole_runs.startup_note(figure))
    return figure, [p.model_copy(update={"cpu": o.cpu}) for p, o in zip(scaling, own, strict=True)], widest
