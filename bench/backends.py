"""One package graded alike wherever it runs: the t1, t2 and numba-parallel references on a
laptop (bwrap), a Docker host (sandboxes in the runner image), an HPC node (apptainer) and a SLURM
cluster (the engine on a compute node), gradings alternating between the backends in one run.

Each backend is measured where it is configured: bwrap always; docker with a Docker API (e.g.
podman's) and the runner image (scripts/build-images.sh); apptainer with its image
(containers/apptainer-host/build-image.sh); slurm with a cluster's SLURM_CONF and a scratch
folder the nodes share. For example:
  CONTAINERS_CONF=containers/podman.conf podman system service --time=0 unix:///tmp/pm.sock &
  PARAGRADE_DOCKER_URL=unix:///tmp/pm.sock PARAGRADE_APPTAINER_BIN=containers/apptainer-host/apptainer \
  PARAGRADE_APPTAINER_IMAGE=$(bash containers/apptainer-host/build-image.sh --path) \
  SLURM_CONF=… BENCH_SLURM_SCRATCH=/shared/scratch .venv/bin/python -m bench.backends [ROUNDS]
      [COURSE/SLUG,…]   (the packages, t1, t2 and numba-parallel unless named)
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

from bench.common import publish
from runners import package
from runners.grading import grader
from runners.nodes import slurm
from runners.protocol import GradeReport
from runners.settings import RunnerSettings, get_settings

nan = float("nan")
PACKAGES = ["treasure-hunt/t1-multiprocessing", "treasure-hunt/t2-mpi",
            "parallel-python/numba-parallel"]


def backends(settings: RunnerSettings) -> list[str]:
    """The backends this machine is configured for (see the module's docstring)."""
    found = ["bwrap"]
    if settings.docker_url:
        found.append("docker")
    if settings.apptainer_image:
        found.append("apptainer")
    if settings.slurm_conf and os.environ.get("BENCH_SLURM_SCRATCH"):
        found.append("slurm")
    return found


def grade(a: package.Assignment, files: dict[str, bytes], backend: str,
          settings: RunnerSettings) -> GradeReport:
    if backend == "slurm":
        on_cluster = settings.model_copy(update={
            "backend": "slurm", "scratch_dir": Path(os.environ["BENCH_SLURM_SCRATCH"])})
        return slurm.grade(a, files, settings=on_cluster, time_limit_s=1200)
    return grader.grade(a, files, backend=backend, settings=settings)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    packages = sys.argv[2].split(",") if len(sys.argv) > 2 else PACKAGES
    settings = get_settings()
    chosen = backends(settings)
    print(f"backends: {', '.join(chosen)}", file=sys.stderr)
    runs: dict[tuple[str, str], list[dict[str, float | str]]] = {}
    for _ in range(rounds):
        for ref in packages:
            a = package.resolve(ref, settings.assignments_dir)
            files = package.code_of(a, "reference")
            for backend in chosen:
                t0 = time.monotonic()
                r = grade(a, files, backend, settings)
                wall = time.monotonic() - t0
                if r.speedup is None:  # shown in the table as not measured, with its verdict
                    print(f"{ref} {backend}: {r.summary}", file=sys.stderr)
                    runs.setdefault((ref, backend), []).append({
                        "verdict": r.verdict.value, "speedup": nan, "ci_low": nan,
                        "ci_high": nan, "score": r.score, "busy": nan, "work": nan,
                        "wall": wall, "overhead": wall - r.timed_time_s})
                    continue
                cpu = r.scaling[-1].cpu if r.scaling else None
                runs.setdefault((ref, backend), []).append({
                    "verdict": r.verdict.value, "speedup": r.speedup.median,
                    "ci_low": r.speedup.ci_low, "ci_high": r.speedup.ci_high,
                    "score": r.score, "busy": cpu.parallelism if cpu else float("nan"),
                    "work": cpu.work_ratio if cpu else float("nan"), "wall": wall,
                    "overhead": wall - r.timed_time_s})
                print(f"{ref} {backend}: {r.speedup.median:.2f}x {r.score:.1f} pts "
                      f"in {wall:.0f} s", file=sys.stderr)
    rows = []
    for (ref, backend), got in runs.items():
        med = {k: statistics.median(float(g[k]) for g in got) for k in got[0] if k != "verdict"}
        rows.append({"package": ref.split("/")[1], "backend": backend, "n": len(got),
                     "verdicts": " ".join(sorted({str(g["verdict"]) for g in got})),
                     "speedups": " ".join(f"{g['speedup']:.2f} ({g['ci_low']:.2f}–"
                                          f"{g['ci_high']:.2f})" for g in got), **med})
    publish("backends", rows, {
        "package": "package", "backend": "backend", "n": "gradings", "verdicts": "verdict",
        "speedups": "speedup with CI, each", "score": "median points %.1f",
        "busy": "busy cores %.2f", "work": "work ratio %.2f", "wall": "grading wall s %.1f",
        "overhead": "overhead s %.1f"})


if __name__ == "__main__":
    main()
