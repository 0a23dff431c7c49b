"""Figure 3: repeatability: coefficient of variation of the speedup over 10 gradings of the t1
reference (each grading draws its own inputs). Usage: .venv/bin/python -m bench.speedup_repeatability [N]
"""

from __future__ import annotations

import statistics
import sys

from bench.common import publish
from runners import grader, package
from runners.settings import get_settings


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    a = package.resolve("treasure-hunt/t1-multiprocessing", get_settings().assignments_dir)
    code = grader.code_of(a, "reference")
    rows = []
    for i in range(n):
        r = grader.grade(a, code)
        assert r.speedup is not None, r.summary
        rows.append({"speedup": r.speedup.median, "ci_low": r.speedup.ci_low,
                     "ci_high": r.speedup.ci_high, "points": r.performance_points,
                     "reps": r.speedup.repetitions})
        print(f"grading {i + 1}: speedup {r.speedup.median:.3f} "
              f"[{r.speedup.ci_low:.3f}, {r.speedup.ci_high:.3f}] perf points {r.performance_points}",
              flush=True)
    sp = [r["speedup"] for r in rows]
    pts = [r["points"] for r in rows]
    cv = statistics.stdev(sp) / statistics.mean(sp)
    print(f"speedup mean {statistics.mean(sp):.3f}, stdev {statistics.stdev(sp):.3f}, CV {cv:.1%}; "
          f"performance points {min(pts):.1f}–{max(pts):.1f} of {a.manifest.scoring.performance_points}")
    publish("speedup_repeatability", rows, {
        "speedup": "speedup %.3f", "ci_low": "CI low %.3f", "ci_high": "CI high %.3f",
        "points": "performance points %.1f", "reps": "runs per side"}, extra={"cv": cv})

if __name__ == "__main__":
    main()
