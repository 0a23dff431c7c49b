"""What each core of this node delivers, second by second: one pinned spinner per core, all at
once, each timing a fixed loop over and over; per second, the median speed against that core's
own best (its 10th-percentile loop time). A shared VM shows stretches where a core reads 0.6-0.75
(another tenant on the host's SMT sibling); a quiet one reads 0.95-1.0 throughout. Run it before
taking repeatability figures: they mean little in a noisy hour.

Usage: .venv/bin/python -m bench.core_speed [SECONDS] (default 30)
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import sys
import time

from bench.common import publish

LOOP = 200_000


def _spin(cpu: int, seconds: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    os.sched_setaffinity(0, {cpu})
    end = time.time() + seconds
    samples = []
    while time.time() < end:
        t0 = time.perf_counter()
        x = 0
        for i in range(LOOP):
            x += i
        samples.append((time.time(), time.perf_counter() - t0))
    out.put((cpu, samples))


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
    cpus = sorted(os.sched_getaffinity(0))
    out: mp.Queue = mp.Queue()  # type: ignore[type-arg]
    procs = [mp.Process(target=_spin, args=(c, seconds, out)) for c in cpus]
    for p in procs:
        p.start()
    results = dict(out.get() for _ in procs)
    for p in procs:
        p.join()
    rows = []
    for cpu in cpus:
        samples = results[cpu]
        best = sorted(d for _, d in samples)[len(samples) // 10]
        start = samples[0][0]
        per_second: dict[int, list[float]] = {}
        for t, d in samples:
            per_second.setdefault(int(t - start), []).append(best / d)
        speeds = [statistics.median(v) for _, v in sorted(per_second.items())]
        slow = sum(s < 0.9 for s in speeds)
        print(f"core {cpu}: {slow} of {len(speeds)} s under 0.9 of its best "
              f"({best * 1000:.2f} ms a loop): " + " ".join(f"{s:.2f}" for s in speeds))
        rows.append({"core": cpu, "slow": slow, "seconds": len(speeds), "best_ms": best * 1000,
                     "lowest": min(speeds), "median": statistics.median(speeds)})
    publish("core_speed", rows, {"core": "core", "slow": "seconds under 0.9", "seconds": "of",
                                 "best_ms": "best loop (ms) %.2f", "lowest": "slowest second %.2f",
                                 "median": "median second %.2f"})


if __name__ == "__main__":
    main()
