"""Runaway submissions: the runner seconds and the verdict of each kind of never-ending submission
on each shipped CPU package (runners/grading/runaway.py bounds them).

Each submission is the package's reference with its entry function replaced by a runaway:
an infinite loop, a fork bomb, a sleep that never ends, and on MPI packages every rank waiting
for a message no rank sends. As on the server, the per-test limits are calibrated from the
reference's own seconds per test (measured first, as validation does; `--uncalibrated`: the
package's wall limit for every test, as `paragrade grade` without a server).

Usage: .venv/bin/python -m bench.runaway [COURSE/SLUG ...] [--kinds loop,forkbomb,sleep,deadlock]
  (default: every shipped CPU and MPI package, every kind that applies).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.common import publish
from runners import package
from runners.grading import grader, testrun
from runners.nodes import hardware
from runners.protocol import TestOutcome, Verdict
from runners.runs.stage import Stage
from runners.sandbox import create_executor
from runners.settings import get_settings

PACKAGES = ["treasure-hunt/t1-multiprocessing", "treasure-hunt/t2-mpi",
            "parallel-python/numba-parallel", "parallel-python/dask",
            "parallel-python/threads-io", "parallel-python/joblib-sweep",
            "parallel-python/scaling-study", "parallel-python/slurm-array"]
BODIES = {
    "loop": "    while True:\n        pass\n",
    "forkbomb": ("    import os\n    while True:\n        try:\n            os.fork()\n"
                 "        except OSError:\n            pass\n"),
    "sleep": "    import time\n    time.sleep(10**6)\n",
    "deadlock": ("    from mpi4py import MPI\n    comm = MPI.COMM_WORLD\n"
                 "    comm.recv(source=(comm.rank + 1) % comm.size)\n"),
}


def runaway(a: package.Assignment, kind: str) -> dict[str, bytes]:
    """The reference's files with its entry function replaced by a runaway of `kind`."""
    files = package.code_of(a, "reference")
    m = a.manifest
    assert m.entry.function is not None
    files[m.entry.file] += f"\n\ndef {m.entry.function}(*args, **kwargs):\n{BODIES[kind]}".encode()
    return files


def reference_seconds(a: package.Assignment) -> dict[str, float]:
    """The reference's seconds per test, as validation records them."""
    settings = get_settings()
    stage = Stage(scratch=settings.scratch_dir)
    try:
        code = stage.add_code("reference", package.code_of(a, "reference"))
        tests, _ = testrun.run_tests(a, code, backend=create_executor(settings).name, seed=1,
                                     gpu_mode="none", cpus=hardware.allotment(a)[0], reveal=True)
    finally:
        stage.cleanup()
    return {t.name: t.duration_s for t in tests if t.outcome is TestOutcome.PASSED}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("packages", nargs="*", default=PACKAGES)
    parser.add_argument("--kinds", default=",".join(BODIES))
    parser.add_argument("--uncalibrated", action="store_true")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    for ref in args.packages:
        a = package.resolve(ref, get_settings().assignments_dir)
        calibration = None if args.uncalibrated else reference_seconds(a)
        for kind in args.kinds.split(","):
            if kind == "deadlock" and a.manifest.resources.kind != "mpi":
                continue
            started = time.monotonic()
            r = grader.grade(a, runaway(a, kind), reference_test_s=calibration)
            seconds = time.monotonic() - started
            hit = next((t for t in r.tests if t.verdict is Verdict.TIMEOUT
                        and t.outcome is TestOutcome.FAILED), None)
            limit = "–" if hit is None else hit.message.rsplit("limit exceeded (", 1)[-1].split(
                " wall")[0]
            rows.append({"package": ref, "kind": kind, "verdict": r.verdict.value,
                         "seconds": seconds, "limit": limit,
                         "ran": sum(t.outcome is not TestOutcome.SKIPPED for t in r.tests),
                         "not_run": sum("not run:" in t.message for t in r.tests),
                         "wall_limit": a.manifest.resources.wall_seconds})
            print(f"{ref} {kind}: {r.verdict.value} in {seconds:.1f} s ({r.summary})", flush=True)
    publish("runaway", rows, {"package": "package", "kind": "runaway", "verdict": "verdict",
                              "seconds": "runner s %.1f", "limit": "the test's limit",
                              "wall_limit": "package wall limit s",
                              "ran": "tests run", "not_run": "not run"})


if __name__ == "__main__":
    main()
