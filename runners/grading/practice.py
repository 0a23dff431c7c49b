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
    input at the top worker count, in a fresh sandbox, after a warm call; every process sampled
    from outside (runners/measure/profile.py). Its answer is not judged: the public tests did,
    and nothing here is a grade. A script entry's program is profiled as one whole run (its
    first 0.4 s go to the sampler's attaching); batch scripts and job arrays not yet."""
    a, m = g.assignment, g.m
    if m.array is not None or m.launcher.kind == "sbatch" or (
            m.entry.style != "script" and m.entry.function is None):
        return Profile(sampler="py-spy", interval_s=1 / profile.RATE, seconds=0.0, processes=[],
                       top=[], balance=None, note="profiles are made of function and script "
                       "entries so far: not of a batch script or a job array")
    g.progress("profiling one call")
    workers = max(a.scaling_workers)
    cfg = configure.make_config(a, executor=g.executor, stage=stage,  # type: ignore[arg-type]
                                code_dir=code_dir, cpus=g.cpus, workers=workers,
                                gpu_mode=g.gpu_mode, serial=False, settings=g.settings)
    hook = load_hook(a)
    rng = np.random.default_rng(g.seed)
    if m.entry.style == "script":
        return _profiled_run(cfg, [str(v) for v in hook.make_args(rng, workers)], files)
    function = m.entry.function
    assert function is not None
    extra = {m.entry.workers_arg: workers} if m.entry.workers_arg else {}
    source = {f"{INSIDE_SUB}/{name}": content.decode(errors="replace")
              for name, content in files.items()}
    with Session(cfg) as session:
        inputs = hook.make_input(rng, workers)
        session.call(function, **inputs, **extra)  # warm: imports, caches
        root = session.root_pid()
        if root is None:
            return Profile(sampler="py-spy", interval_s=1 / profile.RATE, seconds=0.0,
                           processes=[], top=[], balance=None,
                           note="this runner's sandbox backend does not show its processes")
        before = session.pids() or set()
        with profile.sampling(root) as rec:
            _, seconds = session.call(function, **inputs, **extra)
    return profile.summarize(rec, code_dir=INSIDE_SUB, source=source, seconds=seconds,
                             harness=INSIDE_HARNESS, before=before)


def _profiled_run(cfg: object, argv: list[str], files: dict[str, bytes]) -> Profile:
    """A script entry's program, run once whole with every process of its sandbox sampled."""
    recordings: list[profile.Recording] = []

    @contextlib.contextmanager
    def watch(root: int) -> Iterator[None]:
        with profile.sampling(root) as rec:
            recordings.append(rec)
            yield

    result = run_script(cfg, argv, watch=watch)  # type: ignore[arg-type]
    source = {f"{INSIDE_SUB}/{name}": content.decode(errors="replace")
              for name, content in files.items()}
    if not recordings:
        return Profile(sampler="py-spy", interval_s=1 / profile.RATE, seconds=0.0,
                       processes=[], top=[], balance=None,
                       note="this runner's sandbox backend does not show its processes")
    return profile.summarize(recordings[0], code_dir=INSIDE_SUB, source=source,
                             seconds=result.elapsed_s, harness=INSIDE_HARNESS, before=set())
