"""Where the credit thresholds come from: the effective parallelism and work ratio of the shipped
references and of every cheat class (tests/fixtures/cheats), graded in full.

Usage: .venv/bin/python -m bench.credit [ROUNDS] [FILTER]  (ROUNDS gradings of each; FILTER: a
substring of the rows' names, e.g. "t1").
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.common import publish
from runners import package
from runners.grading import grader
from runners.settings import REPO_ROOT, get_settings

CHEATS = REPO_ROOT / "tests" / "fixtures" / "cheats"
SHIPPED = ["treasure-hunt/t1-multiprocessing", "treasure-hunt/t2-mpi",
           "parallel-python/numba-parallel", "parallel-python/dask",
           "parallel-python/joblib-sweep", "parallel-python/threads-io",
           "parallel-python/scaling-study", "parallel-python/slurm-array"]


def subjects() -> list[tuple[str, str, dict[str, bytes]]]:
    """(name, package ref, files) of every reference and cheat."""
    found = []
    for ref in SHIPPED:
        a = package.resolve(ref, get_settings().assignments_dir)
        found.append((f"{ref.split('/')[1]} reference", ref, package.code_of(a, "reference")))
    for path in sorted(CHEATS.glob("t[12]_*.py")):
        ref = SHIPPED[0] if path.name.startswith("t1") else SHIPPED[1]
        found.append((path.stem, ref, {a_entry(ref): path.read_bytes()}))
    return found


def a_entry(ref: str) -> str:
    return package.resolve(ref, get_settings().assignments_dir).manifest.entry.file


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    only = sys.argv[2] if len(sys.argv) > 2 else ""
    rows = []
    for name, ref, files in subjects():
        if only not in name:
            continue
        a = package.resolve(ref, get_settings().assignments_dir)
        for _ in range(rounds):
            r = grader.grade(a, files)
            cpu = r.scaling[-1].cpu if r.scaling else None
            row = {
                "name": name, "verdict": r.verdict.value,
                "speedup": r.speedup.median if r.speedup else float("nan"),
                "parallelism": cpu.parallelism if cpu else float("nan"),
                "baseline_parallelism": cpu.baseline_parallelism if cpu else float("nan"),
                "work_ratio": cpu.work_ratio if cpu else float("nan"),
                "credit": r.credit.status if r.credit else "-",
                "points": r.performance_points, "max": a.manifest.scoring.performance_points,
                "policy": a.manifest.scoring.credit,
            }
            rows.append(row)
            print(f"{name}: {r.summary}", flush=True)
    publish(f"credit{'-' + only if only else ''}", rows, {
        "name": "submission", "verdict": "verdict", "speedup": "speedup %.2f",
        "parallelism": "busy cores %.2f", "baseline_parallelism": "baseline's %.2f",
        "work_ratio": "work ratio %.4f", "policy": "policy", "credit": "credit",
        "points": "performance points %.1f"})


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main()
