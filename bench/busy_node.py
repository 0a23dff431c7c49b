"""Figure: what a sustained neighbour on every core makes of a grading, and which witness saw it.

A package's reference graded N times quiet and N times beside each neighbour (tests/neighbour.py:
K processes spinning unpinned at the sandboxes' priority, started before the grading and stopped
after it). Per grading: the headline speedup, the credit (pending where the node stayed busy),
how many timed windows were short, the probes' median waiting for a CPU and the serial
baseline's own (runners/measure/capacity.py: two witnesses of the run queue), and the seconds it
took (a busy grading re-times its short windows for up to RETIME_FACTOR × the budget).

Usage: .venv/bin/python -m bench.busy_node [N] [CASES] [COURSE/SLUG]
(CASES: comma-separated `quiet` and `nK` for K spinners; default 3 quiet,n1,n3,n4 on
treasure-hunt/t1-multiprocessing)
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.common import publish
from runners import package
from runners.grading import grader
from runners.settings import get_settings
from tests.neighbour import neighbour


def _grading(a: package.Assignment, spinners: int) -> dict[str, Any]:
    started = time.monotonic()
    with neighbour(spinners):
        r = grader.grade(a, package.code_of(a, "reference"))
    s = r.speedup
    seen = s.interference if s is not None else None
    return {"speedup": s.median if s is not None else float("nan"),
            "credit": r.credit.status if r.credit is not None else "-", "score": r.score,
            "short": f"{seen.short}/{seen.windows}" if seen else "-",
            "probe_wait": seen.waiting if seen and seen.waiting is not None else float("nan"),
            "baseline_wait": seen.baseline_waiting
            if seen and seen.baseline_waiting is not None else float("nan"),
            "seconds": time.monotonic() - started}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", nargs="?", type=int, default=3)
    ap.add_argument("cases", nargs="?", default="quiet,n1,n3,n4")
    ap.add_argument("ref", nargs="?", default="treasure-hunt/t1-multiprocessing")
    args = ap.parse_args()
    a = package.load(get_settings().assignments_dir / args.ref)
    rows = []
    for case in args.cases.split(","):
        spinners = 0 if case == "quiet" else int(case.removeprefix("n"))
        for i in range(args.n):
            rows.append({"case": case, "run": i + 1, **_grading(a, spinners)})
    publish("busy_node", rows, {
        "case": "case", "run": "run", "speedup": "speedup %.2f", "credit": "credit",
        "score": "score %.2f", "short": "short windows", "probe_wait": "probes waited %.3f",
        "baseline_wait": "baseline waited %.3f", "seconds": "seconds %.1f"},
        extra={"package": args.ref})


if __name__ == "__main__":
    main()
