"""Time to a trustworthy figure: the timed seconds a grading spends when the headline stops
once its CI fixes the points to within 1 (`stopping.StopRule.points_curve`, today's rule) against
the fixed relative CI width it stopped at before (`target_ci_width` for every figure), on the
shipped CPU references and every cheat class, gradings of the two rules alternating.

Usage: .venv/bin/python -m bench.early_stop [ROUNDS] [FILTER]  (FILTER: a substring of the
subjects' names, e.g. "t1")
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
from collections.abc import Callable
from typing import Any

from bench.common import publish
from bench.credit import subjects
from runners import package
from runners.grading import grader
from runners.measure import stopping
from runners.settings import get_settings

POINTS_RULE = stopping.stop_rules


def width_rules(*args: Any, **kwargs: Any) -> Callable[[int], stopping.StopRule]:
    """The rule before: every figure stops at the package's relative CI width."""
    rule = POINTS_RULE(*args, **kwargs)
    return lambda k: dataclasses.replace(rule(k), points_curve=None)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    only = sys.argv[2] if len(sys.argv) > 2 else ""
    rows: list[dict[str, Any]] = []
    for name, ref, files in subjects():
        if only not in name:
            continue
        a = package.resolve(ref, get_settings().assignments_dir)
        for i in range(rounds):
            for rule in (("width", "points") if i % 2 == 0 else ("points", "width")):
                stopping.stop_rules = POINTS_RULE if rule == "points" else width_rules
                r = grader.grade(a, files)
                rows.append({"name": name, "rule": rule, "timed_s": r.timed_time_s,
                             "wall_s": r.wall_time_s,
                             "reps": r.speedup.repetitions if r.speedup else 0,
                             "speedup": r.speedup.median if r.speedup else float("nan"),
                             "ci": f"{r.speedup.ci_low:.2f}–{r.speedup.ci_high:.2f}"
                             if r.speedup else "-",
                             "points": r.performance_points})
                print(f"{name} [{rule}]: timed {r.timed_time_s:.1f} s of {r.wall_time_s:.1f} s; "
                      f"{r.summary}", flush=True)
    stopping.stop_rules = POINTS_RULE
    summary = []
    for rule in ("width", "points"):
        timed = sorted(r["timed_s"] for r in rows if r["rule"] == rule)
        wall = [r["wall_s"] for r in rows if r["rule"] == rule]
        summary.append({"rule": rule, "gradings": len(timed), "median": statistics.median(timed),
                        "p90": timed[int(0.9 * (len(timed) - 1))], "max": timed[-1],
                        "total": sum(timed), "wall": sum(wall)})
    publish("early_stop", rows, {
        "name": "submission", "rule": "stop rule", "timed_s": "timed s %.1f",
        "wall_s": "grading wall s %.1f", "reps": "runs per side", "speedup": "speedup %.2f",
        "ci": "CI (95 pct)", "points": "performance points %.1f"}, extra={"summary": summary})
    print()
    publish("early_stop_summary", summary, {
        "rule": "stop rule", "gradings": "gradings", "median": "timed s per grading: median %.1f",
        "p90": "p90 %.1f", "max": "max %.1f", "total": "all gradings' timed s %.0f",
        "wall": "all gradings' wall s %.0f"})


if __name__ == "__main__":
    main()
