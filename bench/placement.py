"""Figure: one slowed core, and where the serial baseline runs (runners/measure/placement.py).

A package's reference graded N times in each of four conditions, in turn: a tenant spinning on
core 0 or on core 1 of the grading's set (a visible tenant at the sandbox's priority, as a host's
busy SMT sibling is an invisible one), with the baseline placed by the rule (each core in turn,
pinned) or left to the kernel. The rule holds where the figures with core 0 slowed and with core 1
slowed agree; left to the kernel, the baseline's one thread moves to the free core while pinned
ranks cannot, and the figure follows where it went.

With `--anchor X` the two conditions beside "placed" are the plain figure and the figure anchored
to the reference (its speedup taken as X), the baseline placed in both: does the anchored figure
still depend on which core is slow?

Usage: .venv/bin/python -m bench.placement [N] [COURSE/SLUG] [--anchor X] (default: 2 gradings
of treasure-hunt/t2-mpi in each condition)
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench.common import publish
from bench.timing_interference import tenant
from runners import package
from runners.grading import grader
from runners.nodes import hardware
from runners.settings import get_settings


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", nargs="?", type=int, default=2)
    ap.add_argument("ref", nargs="?", default="treasure-hunt/t2-mpi")
    ap.add_argument("--anchor", type=float, metavar="X",
                    help="plain against anchored to the reference's speedup X, baseline placed")
    args = ap.parse_args()
    n, ref, settings = args.n, args.ref, get_settings()
    a = package.resolve(ref, settings.assignments_dir)
    code = package.code_of(a, "reference")
    cpus, _ = hardware.allotment(a)
    slow = [cpus[0], cpus[-1]]
    rows: list[dict[str, Any]] = []
    # A condition: (its name, the settings, the reference's speedup to anchor to).
    conditions = ([("plain", settings.model_copy(update={"anchor": False}), None),
                   ("anchored", settings.model_copy(update={"anchor": True}), args.anchor)]
                  if args.anchor else
                  [(name, settings.model_copy(update={"baseline_placement": placed}), None)
                   for name, placed in (("placed", True), ("left to the kernel", False))])
    for i in range(n):
        for mode_name, mode, anchor_to in conditions:
            for core in slow:
                started = time.monotonic()
                with tenant(core, 3600.0, 0.0):
                    r = grader.grade(a, code, settings=mode, reference_speedup=anchor_to)
                if r.speedup is None:
                    raise SystemExit(f"{ref}: no speedup measured ({r.summary})")
                rows.append({"round": i + 1, "mode": mode_name, "slowed": core,
                             "speedup": r.speedup.median, "ci_low": r.speedup.ci_low,
                             "ci_high": r.speedup.ci_high, "points": r.performance_points,
                             "wall_s": time.monotonic() - started})
                print(f"{ref} round {i + 1}, {mode_name}, core {core} slowed: "
                      f"{r.speedup.median:.3f}×", flush=True)
    summary = []
    for mode_name, _, _ in conditions:
        by_core = {c: [r["speedup"] for r in rows if r["mode"] == mode_name and r["slowed"] == c]
                   for c in slow}
        medians = {c: statistics.median(v) for c, v in by_core.items()}
        lo, hi = min(medians.values()), max(medians.values())
        summary.append({"mode": mode_name,
                        "slow_first": medians[slow[0]], "slow_last": medians[slow[1]],
                        "apart": hi / lo - 1})
    publish("placement", rows, {"round": "round", "mode": "mode", "slowed": "core slowed",
                                "speedup": "speedup %.3f", "ci_low": "CI low %.3f",
                                "ci_high": "CI high %.3f", "points": "perf points %.1f",
                                "wall_s": "wall s %.0f"}, extra=summary)
    for s in summary:
        print(f"{ref}, {s['mode']}: {s['slow_first']:.3f}× with core {slow[0]} slowed, "
              f"{s['slow_last']:.3f}× with core {slow[1]} slowed ({s['apart']:.1%} apart)")


if __name__ == "__main__":
    main()
