"""Repeatability: the coefficient of variation of the speedup and of the performance points over
N gradings of each shipped reference, one grading at a time, each with its own inputs; and, with
`--busy K`, the same while K other graders grade the reference on disjoint core slices (a node's
runner slots all busy) against idle.

Usage: .venv/bin/python -m bench.speedup_repeatability [N] [COURSE/SLUG ...] [--busy K]
  (default: 10 gradings of treasure-hunt/t1-multiprocessing). A grader takes the package's cores
  from the first cores of the node; with --busy the K neighbours take the next slices, and the
  node needs (K + 1) × cores cores. `--neighbour REF` is the neighbours' own mode (grade forever).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from typing import Any

from bench.common import publish
from runners import grader, package
from runners.settings import get_settings
from runners.worker import confine


def _load(ref: str) -> package.Assignment:
    return package.resolve(ref, get_settings().assignments_dir)


def gradings(ref: str, n: int) -> list[dict[str, Any]]:
    """n gradings of the reference of `ref`, one at a time, on this process's cores."""
    a = _load(ref)
    code = grader.code_of(a, "reference")
    rows = []
    for i in range(n):
        r = grader.grade(a, code)
        if r.speedup is None:
            raise SystemExit(f"{ref}: no speedup measured ({r.summary})")
        rows.append({"package": ref, "speedup": r.speedup.median, "ci_low": r.speedup.ci_low,
                     "ci_high": r.speedup.ci_high, "points": r.performance_points,
                     "credit": r.credit.status if r.credit else "-",
                     "reps": r.speedup.repetitions})
        print(f"{ref} grading {i + 1}: speedup {r.speedup.median:.3f} [{r.speedup.ci_low:.3f}, "
              f"{r.speedup.ci_high:.3f}] perf points {r.performance_points}", flush=True)
    return rows


def cv(values: list[float]) -> float:
    mean = statistics.mean(values)
    return statistics.stdev(values) / mean if len(values) > 1 and mean else 0.0


def summary(ref: str, rows: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    sp = [r["speedup"] for r in rows]
    pts = [r["points"] for r in rows]
    return {"package": ref, "mode": mode, "gradings": len(rows),
            "median": statistics.median(sp), "cv_speedup": cv(sp),
            "cv_points": cv(pts) if any(pts) else 0.0, "points": f"{min(pts):.1f}–{max(pts):.1f}"}


def neighbours(ref: str, k: int, cores: int) -> list[subprocess.Popen[bytes]]:
    """k graders of `ref` looping on the core slices after this process's own."""
    node = sorted(os.sched_getaffinity(0))
    if len(node) < (k + 1) * cores:
        raise SystemExit(f"--busy {k} needs {(k + 1) * cores} cores; this node has {len(node)}")
    procs = []
    for j in range(1, k + 1):
        cpus = ",".join(map(str, node[j * cores:(j + 1) * cores]))
        procs.append(subprocess.Popen(
            ["taskset", "-c", cpus, sys.executable, "-m", "bench.speedup_repeatability",
             "--neighbour", ref], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True))  # its sandboxes too go with its process group
    time.sleep(5)  # their first gradings under way
    return procs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("n", nargs="?", type=int, default=10)
    parser.add_argument("refs", nargs="*", default=["treasure-hunt/t1-multiprocessing"])
    parser.add_argument("--busy", type=int, default=0, help="graders beside the measured one")
    parser.add_argument("--neighbour", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.neighbour:
        while True:
            gradings(opts.neighbour, 1)
    rows, table = [], []
    for ref in opts.refs:
        cores = _load(ref).manifest.resources.cores
        node = sorted(os.sched_getaffinity(0))
        confine(set(node[:cores]))  # this grader's slice (its BLAS threads too): the first cores
        try:
            idle = gradings(ref, opts.n)
            rows += idle
            table.append(summary(ref, idle, "idle"))
            if opts.busy:
                procs = neighbours(ref, opts.busy, cores)
                try:
                    busy = gradings(ref, opts.n)
                finally:
                    for p in procs:
                        os.killpg(p.pid, signal.SIGKILL)
                        p.wait()
                rows += [{**r, "package": f"{ref} (busy)"} for r in busy]
                table.append(summary(ref, busy, f"{opts.busy} neighbours"))
        finally:
            confine(set(node))
    publish("speedup_repeatability", table, {
        "package": "package", "mode": "node", "gradings": "gradings",
        "median": "median speedup %.3f", "cv_speedup": "CV speedup %.1%",
        "cv_points": "CV points %.1%", "points": "points"}, extra={"gradings": rows})


if __name__ == "__main__":
    main()
