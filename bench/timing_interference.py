"""Figure: what another tenant of the machine does to a measured speedup, per timing mode.

A package's reference (all its cores) against its serial baseline, timed at one worker count by
`timed_calls.measure` as a grading would, N times per mode: `blocks` (one side's sandbox at a time,
3 timed calls per block) and `paired` (both sandboxes live, calls alternating, the idle side
frozen). Once on a quiet machine and once beside a tenant that spins on the last allotted core
for ON seconds out of every ON + OFF (a core taken away now and then, as on a shared VM).
Usage: .venv/bin/python -m bench.timing_interference [N] [BUDGET_S] [ON] [OFF] [PACKAGE]
(PACKAGE: a function-entry package, treasure-hunt/t1-multiprocessing by default)
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from bench.common import publish
from runners import package
from runners.grading import measuring
from runners.measure import stats, stopping, timed_calls
from runners.nodes import hardware
from runners.runs import configure
from runners.runs.runconfig import RunConfig
from runners.runs.stage import Stage
from runners.sandbox import create_executor
from runners.settings import get_settings


def _tenant(cpu: int, on: float, off: float) -> None:
    os.sched_setaffinity(0, {cpu})
    while True:
        end = time.monotonic() + on
        while time.monotonic() < end:
            pass
        time.sleep(off)


@contextmanager
def tenant(cpu: int | None, on: float, off: float) -> Iterator[None]:
    if cpu is None:
        yield
        return
    p = mp.get_context("fork").Process(target=_tenant, args=(cpu, on, off), daemon=True)
    p.start()
    try:
        yield
    finally:
        p.kill()
        p.join()


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    budget = float(sys.argv[2]) if len(sys.argv) > 2 else 6.0
    on = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    off = float(sys.argv[4]) if len(sys.argv) > 4 else 2.0
    settings = get_settings()
    ref = sys.argv[5] if len(sys.argv) > 5 else "treasure-hunt/t1-multiprocessing"
    a = package.resolve(ref, settings.assignments_dir)
    m = a.manifest
    assert m.entry.function is not None
    executor = create_executor(settings)
    cpus, _ = hardware.allotment(a)
    workers = len(cpus)
    hook = measuring.load_hook(a)
    stage = Stage(scratch=settings.scratch_dir)
    rows = []
    try:
        code = stage.add_code("reference", package.code_of(a, "reference"))
        base = stage.add_code("baseline", package.code_of(a, "baseline"))

        def cfg(d: Path, k: int, serial: bool) -> RunConfig:
            return configure.make_config(a, executor=executor, stage=stage, code_dir=d, cpus=cpus,
                                         workers=k, gpu_mode="none", serial=serial,
                                         settings=settings)

        for label, cpu in (("quiet", None), (f"tenant {on:g} s of {on + off:g} s", cpus[-1])):
            # Both modes take turns, so that a slow drift of the machine is shared.
            got: dict[str, list[tuple[float, int]]] = {"blocks": [], "paired": []}
            with tenant(cpu, on, off):
                for i in range(n):
                    for mode in ("blocks", "paired"):
                        s = timed_calls.measure(
                            hook=hook, function=m.entry.function, workers=workers,
                            workers_arg=m.entry.workers_arg, baseline_cfg=cfg(base, 1, True),
                            submission_cfg=cfg(code, workers, False),
                            rng=np.random.default_rng(i), stop=stopping.StopRule(
                                budget_s=budget, min_reps=m.timing.min_repetitions,
                                max_reps=m.timing.max_repetitions,
                                target_width=m.timing.target_ci_width),
                            paired=mode == "paired")
                        point, _, _ = stats.ratio_ci(s.baseline, s.submission)
                        got[mode].append((point, min(len(s.baseline), len(s.submission))))
                        print(f"{label}, {mode} {i + 1}: {point:.3f} ({got[mode][-1][1]} runs)",
                              flush=True)
            for mode, results in got.items():
                sp = [p for p, _ in results]
                rows.append({"machine": label, "mode": mode, "mean": statistics.mean(sp),
                             "min": min(sp), "max": max(sp),
                             "stdev": statistics.stdev(sp) if len(sp) > 1 else 0.0,
                             "runs": statistics.mean(r for _, r in results)})
    finally:
        stage.cleanup()
    publish(f"timing_interference-{a.manifest.slug}", rows, {
        "machine": "machine", "mode": "timing mode", "mean": "mean speedup %.2f",
        "min": "lowest %.2f", "max": "highest %.2f", "stdev": "stdev %.3f",
        "runs": "timed runs per side %.1f"}, extra={"n": n, "budget_s": budget, "on": on,
                                                     "off": off, "workers": workers,
                                                     "package": ref})


if __name__ == "__main__":
    main()
