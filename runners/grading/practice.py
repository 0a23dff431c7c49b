"""Practice runs: a student's file on the grading hardware, never graded.

A practice run runs the package's **public** tests only (the hidden ones never run, so nothing of
them reaches the report), in the same sandbox on the same kind of runner as a graded job. With
`timed` it adds one short timing: `PRACTICE_SHARE` of the grading's budget at the top worker
count alone, as a final run's turn (every timed answer checked). Its report says "Practice: not
graded" first and carries no points: the server stores it apart from grades (server/services/
intake/practice.py), so it can reach no board, quota, statistic, final run, export or LMS.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from runners.grading.measuring import load_hook
from runners.grading.state import Grading
from runners.measure import profile
from runners.protocol import GradeReport, Profile
from runners.runs import configure
from runners.runs.launch import INSIDE_HARNESS, INSIDE_SUB, run_script
from runners.runs.session import Session

PRACTICE_SHARE = 0.25
"""The part of a grading's timing budget a timed practice run spends (the top worker count)."""

HEADLINE = "Practice: not graded"


def practice_report(report: GradeReport) -> GradeReport:
    """`report` as a practice run's: marked, headed so, its points none."""
    notes = [*report.notes, "practice run: the public tests only (the hidden ones run when you "
             "submit)" + ("; one short timing at the top worker count: a graded submission is "
                          "timed at every worker count on its whole budget"
                          if report.speedup is not None else "")]
    return report.model_copy(update={
        "practice": True, "summary": f"{HEADLINE} · {report.summary}", "score": 0.0,
        "test_points": 0.0, "performance_points": 0.0, "notes": notes})


def profiled_call(g: Grading, stage: object, code_dir: Path, files: dict[str, bytes]) -> Profile:
    """Where the time of one untimed call went: the student's function on the package's timed
    input at the top worker count, in a fresh sandbox, after a warm call; every process of
    every node's sandbox sampled from outside (runners/measure/profile.py). Its answer is not
    judged: the tests did, and nothing here is a grade. A script entry's program (a batch
    script's too) is profiled as one whole run (its first 0.4 s go to the sampler's
    attaching); job arrays not yet. `cost_s`: the runner's wall seconds for all of it."""
    a, m = g.assignment, g.m
    t0 = time.monotonic()
    if m.array is not None or (m.entry.style != "script" and m.entry.function is None):
        return _empty("profiles are made of function and script entries (batch scripts "
                      "among them) so far: not of a job array")
    g.progress("profiling one call")
    workers = max(a.scaling_workers)
    cfg = configure.make_config(a, executor=g.executor, stage=stage,  # type: ignore[arg-type]
                                code_dir=code_dir, cpus=g.cpus, workers=workers,
                                gpu_mode=g.gpu_mode, serial=False, settings=g.settings)
    if g.gpu_mode == "real":  # kernels end where they are launched: their time is on the host
        cfg = dataclasses.replace(cfg, extra_env={**cfg.extra_env, "CUDA_LAUNCH_BLOCKING": "1"})
    hook = load_hook(a)
    rng = np.random.default_rng(g.seed)
    source = {f"{INSIDE_SUB}/{name}": content.decode(errors="replace")
              for name, content in files.items()}
    if m.entry.style == "script":
        got = _profiled_run(cfg, [str(v) for v in hook.make_args(rng, workers)], source,
                            g.gpu_mode)
        return got.model_copy(update={"cost_s": round(time.monotonic() - t0, 2)})
    function = m.entry.function
    assert function is not None
    extra = {m.entry.workers_arg: workers} if m.entry.workers_arg else {}
    make_input = hook.make_input
    if g.gpu_mode == "simulated":  # a GPU's timed input would run for minutes in the simulator
        make_input = getattr(hook, "make_simulated_input", None)
        if not callable(make_input):
            return _empty("no profile on the CUDA simulator: this package's timing hook gives "
                          "no input small enough for it (make_simulated_input)")
    with Session(cfg) as session:
        inputs = make_input(rng, workers)
        _, warm_s = session.call(function, **inputs, **extra)  # warm: imports, caches
        roots, unseen = _seen(session.roots())
        if not roots:
            return _empty(NOT_SHOWN)
        before = session.pids() or set()
        with profile.sampling_all(roots, rate=profile.rate_for(warm_s)) as recs:
            _, seconds = session.call(function, **inputs, **extra)
    got = profile.summarize(recs, code_dir=INSIDE_SUB, source=source, seconds=seconds,
                            harness=INSIDE_HARNESS, before=before, gpu_mode=g.gpu_mode)
    return _noted(got, unseen).model_copy(update={"cost_s": round(time.monotonic() - t0, 2)})


NOT_SHOWN = "this runner's sandbox backend does not show its processes"


def _empty(note: str) -> Profile:
    return Profile(sampler="py-spy", interval_s=1 / profile.RATE, seconds=0.0, processes=[],
                   top=[], balance=None, note=note)


def _seen(roots: list[tuple[str | None, int | None]]
          ) -> tuple[list[tuple[str | None, int]], list[str]]:
    """The nodes' sandboxes this host can sample, and the names of those it cannot."""
    return ([(node, pid) for node, pid in roots if pid is not None],
            [node or "this node" for node, pid in roots if pid is None])


def _noted(p: Profile, unseen: list[str]) -> Profile:
    if not unseen:
        return p
    note = (f"not sampled: the sandbox on {', '.join(unseen)} (another host's: its node agent "
            "does not sample yet)")
    return p.model_copy(update={"note": "; ".join(n for n in (p.note, note) if n)})


def _profiled_run(cfg: object, argv: list[str], source: dict[str, str],
                  gpu_mode: str) -> Profile:
    """A script entry's program, run once whole with every process of every node's sandbox
    sampled."""
    recordings: list[profile.Recording] = []
    unseen: list[str] = []

    @contextlib.contextmanager
    def watch(roots: list[tuple[str | None, int | None]]) -> Iterator[None]:
        seen, missing = _seen(roots)
        unseen.extend(missing)
        with profile.sampling_all(seen) as recs:
            recordings.extend(recs)
            yield

    result = run_script(cfg, argv, watch=watch)  # type: ignore[arg-type]
    if not recordings:
        return _empty(NOT_SHOWN)
    got = profile.summarize(recordings, code_dir=INSIDE_SUB, source=source,
                            seconds=result.elapsed_s, harness=INSIDE_HARNESS, before=set(),
                            gpu_mode=gpu_mode)
    return _noted(got, unseen)
