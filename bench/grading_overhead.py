"""Where a grading's time goes: total wall time, the timed runs inside it, and each phase
(environment.phases: set-up, tests, timing and its timed calls, start-up runs, report).

Usage: .venv/bin/python -m bench.grading_overhead [N] [COURSE/SLUG ...] [--compare]
  (default: 3 gradings of treasure-hunt/t1-multiprocessing's reference). --compare grades each
  package both ways, alternating: tests in a fresh sandbox each (PARAGRADE_FORK_TESTS=0, the way
  before the zygote) and forked from one sandbox's zygote (the default).
"""

from __future__ import annotations

import os
import sys

from bench.common import publish
from runners import grader, package
from runners.settings import get_settings


def main() -> None:
    args = sys.argv[1:]
    compare = "--compare" in args
    args = [a for a in args if a != "--compare"]
    n = int(args.pop(0)) if args and args[0].isdigit() else 3
    refs = args or ["treasure-hunt/t1-multiprocessing"]
    modes = ["fresh", "forked"] if compare else ["forked"]
    rows = []
    for ref in refs:
        a = package.resolve(ref, get_settings().assignments_dir)
        for _ in range(n):
            for mode in modes:
                # read by the test process the grader starts (runners.pytest_plugin)
                os.environ["PARAGRADE_FORK_TESTS"] = "1" if mode == "forked" else "0"
                r = grader.grade(a, grader.code_of(a, "reference"))
                ph = r.environment.phases
                rows.append({"package": ref.split("/")[1], "tests_in": mode,
                             "wall_s": r.wall_time_s, "timed_s": r.timed_time_s,
                             "overhead_s": r.wall_time_s - r.timed_time_s,
                             "setup_s": ph.get("set-up", 0.0), "tests_s": ph.get("tests", 0.0),
                             "untimed_s": ph.get("timing", 0.0) - r.timed_time_s,
                             "startup_s": ph.get("start-up runs", 0.0),
                             "report_s": ph.get("report", 0.0),
                             "runs_per_side": r.speedup.repetitions if r.speedup else 0})
                print(f"{ref} ({mode}): {r.summary}; {ph}", flush=True)
    publish("grading_overhead", rows, {
        "package": "package", "tests_in": "tests", "wall_s": "wall (s) %.1f",
        "timed_s": "timed runs (s) %.1f", "overhead_s": "overhead (s) %.1f",
        "setup_s": "set-up %.2f", "tests_s": "tests %.2f",
        "untimed_s": "timing, untimed part %.2f", "startup_s": "start-up runs %.2f",
        "report_s": "report %.2f", "runs_per_side": "timed runs per side"})


if __name__ == "__main__":
    main()
