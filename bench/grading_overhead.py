"""Figure 2: total grading wall time vs the sum of the timed runs it contains (platform overhead).

Usage: python bench/grading_overhead.py [ASSIGNMENT] (default treasure-hunt/t1-multiprocessing)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

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
    print("| wall (s) | timed runs (s) | overhead (s) | timed share | timed runs per side |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['wall_s']:.1f} | {r['timed_s']:.1f} | {r['overhead_s']:.1f} "
              f"| {r['timed_share']:.0%} | {r['runs_per_side']} |")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "grading_overhead.json").write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
