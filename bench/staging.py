"""Staging cost of large arguments: the grader's file mapped in the sandbox, against base64 frames.

For each size (16 MiB, 256 MiB, 1 GiB of float64) one bwrap sandbox is called with the array
(`total(a)`: reads one value per page): staging is the call's whole wall time on the grader's
side minus the timed part, and the timed part shows what reading the mapped input costs. "frames"
is the earlier way (every array base64 in a JSON frame, decoded into a copy): its cap is the
harness's 256 MiB frame. The sandbox has 512 MiB of memory either way.
Usage: .venv/bin/python -m bench.staging [REPEATS] [LARGEST]   (LARGEST: a size's label, as
"256 MiB"; every size unless named)
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from bench.common import publish
from runners.harness import worker as wire
from runners.runs.failures import SubmissionFailure
from runners.runs.runconfig import RunConfig
from runners.runs.session import Session
from runners.runs.stage import Stage
from runners.sandbox import Limits, create_executor
from runners.settings import get_settings

SIZES = {"16 MiB": 1 << 21, "256 MiB": 1 << 25, "1 GiB": 1 << 27}
SOURCE = "def total(a):\n    return float(a[::512].sum())\n"


def measure(stage: Stage, arr: np.ndarray, repeats: int) -> tuple[float, float] | str:
    """(median staging seconds, median timed seconds), or why the call failed."""
    settings = get_settings()
    code = stage.add_code(f"c{time.monotonic_ns()}", {"solution.py": SOURCE.encode()})
    cfg = RunConfig(executor=create_executor(settings, "bwrap"), runtime_dir=settings.runtime_dir,
                    stage=stage, code_dir=code, entry_file="solution.py", launcher="python",
                    ranks=1, limits=Limits(cpus=(0,), wall_s=300, memory_mb=512))
    staging, timed = [], []
    try:
        with Session(cfg) as session:
            for _ in range(repeats):
                t0 = time.perf_counter()
                value, secs = session.call("total", arr)
                staging.append(time.perf_counter() - t0 - secs)
                timed.append(secs)
                assert value == float(arr[::512].sum())
    except SubmissionFailure as exc:
        if 4 * arr.nbytes // 3 > wire.MAX_FRAME:
            return f"refused: over the harness's {wire.MAX_FRAME >> 20} MiB frame cap"
        return exc.message.splitlines()[0][:60]
    return statistics.median(staging), statistics.median(timed)


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    labels = list(SIZES)
    if len(sys.argv) > 2:
        if sys.argv[2] not in SIZES:
            sys.exit(f"no size {sys.argv[2]!r}: one of {', '.join(SIZES)}")
        labels = labels[:labels.index(sys.argv[2]) + 1]
    rows = []
    stage = Stage(scratch=get_settings().scratch_dir)
    file_min = wire.FILE_MIN
    try:
        for label in labels:
            n = SIZES[label]
            arr = np.random.default_rng(0).random(n)
            for way, threshold in (("file", file_min), ("frames", 1 << 62)):
                wire.FILE_MIN = threshold  # the grader's side decides how arguments travel
                got = measure(stage, arr, repeats)
                row = {"size": label, "way": way}
                if isinstance(got, str):
                    row.update(staging_s="-", timed_ms="-", note=got)
                else:
                    row.update(staging_s=f"{got[0]:.3f}", timed_ms=f"{got[1] * 1e3:.2f}", note="")
                rows.append(row)
                print(row, flush=True)
            del arr
    finally:
        wire.FILE_MIN = file_min
        stage.cleanup()
    publish("staging", rows, {"size": "array", "way": "how it travels",
                              "staging_s": "staging (s, untimed)",
                              "timed_ms": "timed call (ms)", "note": "note"})


if __name__ == "__main__":
    main()
