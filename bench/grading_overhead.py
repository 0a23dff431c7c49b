"""Figure 2: total grading wall time vs the sum of the timed runs it contains (platform overhead).

Usage: .venv/bin/python -m bench.grading_overhead [ASSIGNMENT] (default treasure-hunt/t1-multiprocessing)
"""

from __future__ import annotations

import sys

from bench.common import publish
from runners import grader, package
from runners.settings import get_settings


def main() -> None:
    ref = sys.argv[1] if len(sys.argv) > 1 else "treasure-hunt/t1-multiprocessing"
    a = package.resolve(ref, get_settings().assignments_dir)
    rows = []
    for _ in range(3):
        r = grader.grade(a, grader.code_of(a, "reference"))
        rows.append({"wall_s": r.wall_time_s, "timed_s": r.timed_time_s,
                     "overhead_s": r.wall_time_s - r.timed_time_s,
                     "timed_share": r.timed_time_s / r.wall_time_s,
                     "runs_per_side": r.speedup.repetitions if r.speedup else 0})
    print(f"{a.ref} reference, 3 gradings")
    publish("grading_overhead", rows, {
        "wall_s": "wall (s) %.1f", "timed_s": "timed runs (s) %.1f", "overhead_s": "overhead (s) %.1f",
        "timed_share": "timed share %.0%", "runs_per_side": "timed runs per side"})

if __name__ == "__main__":
    main()
