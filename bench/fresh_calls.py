"""Figure: what `[timing] fresh_calls` costs and what it stops (runners/runs/zygote.FreshCalls).

Treasure hunt 1's reference and the kept-pool cheat (tests/fixtures/cheats/t1_pool_kept.py: the
pool made in the untimed warm-up, kept in a module global) graded N times each with the package's
fresh calls and with calls sharing one process, in turn. With fresh calls the cheat pays for its
pool as the reference does and its figure falls to the reference's; the cost is the timing
phase's wall seconds per timed call (a fork, the submission's import and the sandbox's reset
between calls, all outside the timed region).

First, the cost alone (`cost`): 20 calls of a tiny input in one sandbox, shared and fresh.

Usage: .venv/bin/python -m bench.fresh_calls [N] (default 3 rounds; 0: the cost alone)
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import publish
from runners import package
from runners.grading import grader
from runners.runs import zygote
from runners.runs.runconfig import RunConfig
from runners.runs.session import Session
from runners.runs.stage import Stage
from runners.runs.zygote import FreshCalls
from runners.sandbox import Limits, create_executor
from runners.settings import get_settings

CHEAT = Path(__file__).parent.parent / "tests" / "fixtures" / "cheats" / "t1_pool_kept.py"


def cost(calls: int = 20) -> list[dict[str, Any]]:
    """Wall seconds per call around t1's reference on a tiny input (n = 1000), calls sharing one
    sandbox's process against fresh calls (a zygote's child each), in one sandbox on one core:
    what a fresh call adds to a grading's wall time, outside the timed region."""
    settings = get_settings()
    a = package.resolve("treasure-hunt/t1-multiprocessing", settings.assignments_dir)
    stage = Stage()
    rows = []
    try:
        code = stage.add_code("ref", package.code_of(a, "reference"))
        cfg = RunConfig(executor=create_executor(settings, "bwrap"),
                        runtime_dir=settings.runtime_dir, stage=stage, code_dir=code,
                        entry_file="solution.py", launcher="python", ranks=1,
                        limits=Limits(cpus=(0,), wall_s=60, memory_mb=1024))
        for fresh in (False, True):
            opened: Session | FreshCalls = (FreshCalls(cfg, zygote.preload_modules(
                package.code_of(a, "reference"))) if fresh else Session(cfg))
            with opened as box:
                box.call("parallel_sum", n=1000, chunks=4, workers=1)  # warm-up
                inside = 0.0
                started = time.perf_counter()
                for _ in range(calls):
                    inside += box.call("parallel_sum", n=1000, chunks=4, workers=1)[1]
                wall = time.perf_counter() - started
            rows.append({"calls": "fresh" if fresh else "shared", "n": calls,
                         "wall_per_call_s": wall / calls, "timed_per_call_s": inside / calls,
                         "untimed_per_call_s": (wall - inside) / calls})
            print(f"{rows[-1]['calls']} calls: {wall / calls * 1000:.1f} ms a call, "
                  f"{inside / calls * 1000:.1f} ms of it timed", flush=True)
    finally:
        stage.cleanup()
    return rows


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    overhead = cost()
    if n == 0:  # the cost alone
        publish("fresh_calls_cost", overhead, {
            "calls": "calls", "n": "n", "wall_per_call_s": "wall s per call %.4f",
            "timed_per_call_s": "timed s per call %.4f",
            "untimed_per_call_s": "untimed s per call %.4f"})
        return
    settings = get_settings()
    a = package.resolve("treasure-hunt/t1-multiprocessing", settings.assignments_dir)
    shared = package.Assignment(a.root, a.manifest.model_copy(update={
        "timing": a.manifest.timing.model_copy(update={"fresh_calls": False})}))
    solutions = {"reference": package.code_of(a, "reference"),
                 "kept pool": {"solution.py": CHEAT.read_bytes()}}
    rows: list[dict[str, Any]] = []
    for i in range(n):
        for fresh, pkg in ((True, a), (False, shared)):
            for name, files in solutions.items():
                started = time.monotonic()
                r = grader.grade(pkg, files)
                if r.speedup is None:
                    raise SystemExit(f"{name}: no speedup measured ({r.summary})")
                timing_s = r.environment.phases.get("timing", 0.0)
                calls = 2 * r.speedup.repetitions
                rows.append({"round": i + 1, "fresh": fresh, "solution": name,
                             "speedup": r.speedup.median, "points": r.performance_points,
                             "timing_s": timing_s,
                             "untimed_per_call_s": (timing_s - r.timed_time_s) / max(1, calls),
                             "timed_s": r.timed_time_s, "wall_s": time.monotonic() - started})
                print(f"round {i + 1}, {'fresh' if fresh else 'shared'} calls, {name}: "
                      f"{r.speedup.median:.3f}×, timing {timing_s:.1f} s for {calls} timed calls "
                      f"({r.timed_time_s:.1f} s timed)", flush=True)
    summary = []
    for fresh in (True, False):
        for name in solutions:
            mine = [r for r in rows if r["fresh"] is fresh and r["solution"] == name]
            summary.append({"calls": "fresh" if fresh else "shared", "solution": name,
                            "speedup": statistics.median(r["speedup"] for r in mine),
                            "untimed_per_call_s": statistics.median(
                                r["untimed_per_call_s"] for r in mine)})
    publish("fresh_calls", rows, {"round": "round", "fresh": "fresh calls", "solution": "solution",
                                  "speedup": "speedup %.3f", "points": "perf points %.1f",
                                  "timing_s": "timing phase s %.1f",
                                  "untimed_per_call_s": "untimed s per timed call %.3f",
                                  "timed_s": "timed s %.1f", "wall_s": "wall s %.0f"},
            extra={"summary": summary, "cost": overhead})
    for s in summary:
        print(f"{s['calls']} calls, {s['solution']}: median {s['speedup']:.3f}×, "
              f"{s['untimed_per_call_s']:.3f} s untimed per timed call")


if __name__ == "__main__":
    main()
