"""Figure: one slowed core, and where the serial baseline runs (runners/measure/placement.py).

A package's reference graded N times in each of four conditions, in turn: a tenant spinning on
core 0 or on core 1 of the grading's set (a visible tenant at the sandbox's priority, as a host's
busy SMT sibling is an invisible one), with the baseline placed by the rule (each core in turn,
pinned) or left to the kernel. The rule holds where the figures with core 0 slowed and with core 1
slowed agree; left to the kernel, the baseline's one thread moves to the free core while pinned
ranks cannot, and the figure follows where it went.

Usage: .venv/bin/python -m bench.placement [N] [COURSE/SLUG] (default: 2 gradings of
treasure-hunt/t2-mpi in each condition)
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from bench.common import publish
from bench.timing_interference import tenant
from runners import package
from runners.grading import grader
from runners.nodes import hardware
from runners.settings import get_settings


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    ref = sys.argv[2] if len(sys.argv) > 2 else "treasure-hunt/t2-mpi"
    settings = get_settings()
    a = package.resolve(ref, settings.assignments_dir)
    code = package.code_of(a, "reference")
    cpus, _ = hardware.allotment(a)
    slow = [cpus[0], cpus[-1]]
    rows: list[dict[str, Any]] = []
    for i in range(n):
        for placed in (True, False):
            mode = settings.model_copy(update={"baseline_placement": placed})
            for core in slow:
                started = time.monotonic()
                with tenant(core, 3600.0, 0.0):
                    r = grader.grade(a, code, settings=mode)
                if r.speedup is None:
                    raise SystemExit(f"{ref}: no speedup measured ({r.summary})")
                rows.append({"round": i + 1, "placed": placed, "slowed": core,
                             "speedup": r.speedup.median, "ci_low": r.speedup.ci_low,
                             "ci_high": r.speedup.ci_high, "points": r.performance_points,
                             "wall_s": time.monotonic() - started})
                print(f"{ref} round {i + 1}, baseline {'placed' if placed else 'left to the kernel'}"
                      f", core {core} slowed: {r.speedup.median:.3f}×", flush=True)
    summary = []
    for placed in (True, False):
        by_core = {c: [r["speedup"] for r in rows if r["placed"] is placed and r["slowed"] == c]
                   for c in slow}
        medians = {c: statistics.median(v) for c, v in by_core.items()}
        lo, hi = min(medians.values()), max(medians.values())
        summary.append({"mode": "placed" if placed else "left to the kernel",
                        "slow_first": medians[slow[0]], "slow_last": medians[slow[1]],
                        "apart": hi / lo - 1})
    publish("placement", rows, {"round": "round", "placed": "placed", "slowed": "core slowed",
                                "speedup": "speedup %.3f", "ci_low": "CI low %.3f",
                                "ci_high": "CI high %.3f", "points": "perf points %.1f",
                                "wall_s": "wall s %.0f"}, extra=summary)
    for s in summary:
        print(f"{ref}, baseline {s['mode']}: {s['slow_first']:.3f}× with core {slow[0]} slowed, "
              f"{s['slow_last']:.3f}× with core {slow[1]} slowed ({s['apart']:.1%} apart)")


if __name__ == "__main__":
    main()
