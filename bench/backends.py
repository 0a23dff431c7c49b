"""The same package graded on a laptop (bwrap) and on a Docker host (sandboxes in the runner
image): the t1 and t2 references, gradings alternating between the two backends.

Needs the runner image (scripts/build-images.sh) and a Docker API, e.g. podman's:
  CONTAINERS_CONF=containers/podman.conf podman system service --time=0 unix:///tmp/pm.sock &
  PARAGRADE_DOCKER_URL=unix:///tmp/pm.sock .venv/bin/python -m bench.backends [ROUNDS]
"""

from __future__ import annotations

import statistics
import sys
import time

from bench.common import publish
from runners import grader, package
from runners.settings import get_settings

PACKAGES = ["treasure-hunt/t1-multiprocessing", "treasure-hunt/t2-mpi"]
BACKENDS = ["bwrap", "docker"]


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    settings = get_settings()
    if not settings.docker_url:
        sys.exit("set PARAGRADE_DOCKER_URL to a Docker API (see this module's docstring)")
    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    for _ in range(rounds):
        for ref in PACKAGES:
            a = package.resolve(ref, settings.assignments_dir)
            files = grader.code_of(a, "reference")
            for backend in BACKENDS:
                t0 = time.monotonic()
                r = grader.grade(a, files, backend=backend, settings=settings)
                wall = time.monotonic() - t0
                assert r.speedup is not None, r.summary
                cpu = r.scaling[-1].cpu if r.scaling else None
                runs.setdefault((ref, backend), []).append({
                    "speedup": r.speedup.median, "ci": r.speedup.ci_high - r.speedup.ci_low,
                    "score": r.score, "busy": cpu.parallelism if cpu else float("nan"),
                    "work": cpu.work_ratio if cpu else float("nan"), "wall": wall})
                print(f"{ref} {backend}: {r.speedup.median:.2f}x {r.score:.1f} pts "
                      f"in {wall:.0f} s", file=sys.stderr)
    rows = []
    for (ref, backend), got in runs.items():
        med = {k: statistics.median(g[k] for g in got) for k in got[0]}
        rows.append({"package": ref.split("/")[1], "backend": backend, "n": len(got),
                     "speedups": " ".join(f"{g['speedup']:.2f}" for g in got), **med})
    publish("backends", rows, {
        "package": "package", "backend": "backend", "n": "gradings",
        "speedup": "median speedup %.2f", "speedups": "each", "ci": "median CI width %.2f",
        "score": "median points %.1f", "busy": "busy cores %.2f", "work": "work ratio %.2f",
        "wall": "grading wall s %.0f"})


if __name__ == "__main__":
    main()
