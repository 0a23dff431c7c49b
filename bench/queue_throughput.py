"""Queue latency (publish → a runner claims the job) and burst throughput, per broker.

For each broker (the embedded SQLite one and Redis on 127.0.0.1:6379): a real server, real
runner processes, the test package `quick` (graded in about a second, no timing).
- latency: one runner, jobs submitted one at a time (each waits for the previous grade): the
  time from the job's publication to its claim by the idle runner, which is what the queue adds.
- burst: BURST submissions at once, then two runners; wall time until every one is graded.

    .venv/bin/python -m bench.queue_throughput [--burst 500] [--latency-jobs 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import redis
from sqlalchemy import func, select

from bench.common import publish
from server.models import Job, Submission
from server.settings import REPO_ROOT
from tests.server.live import Platform, wait_until

PACKAGES = REPO_ROOT / "tests" / "fixtures" / "queue"
GOOD = (PACKAGES / "quick" / "reference" / "solution.py").read_bytes()


def _pending(p: Platform) -> int:
    with p.sessions() as s:
        return int(s.scalar(select(func.count()).select_from(Submission).where(
            Submission.status.in_(("queued", "running")))) or 0)


def measure(label: str, broker: str, tmp: Path, *, burst: int, latency_jobs: int,
            key_prefix: str = "") -> dict[str, object]:
    p = Platform(tmp, broker, key_prefix=key_prefix, assignments_dir=PACKAGES)
    try:
        code = p.course("quick")
        p.http.patch("/api/courses/c/assignments/quick", json={"quota_count": 10_000},
                     headers=p.prof).raise_for_status()
        students = [p.student(f"s{i}", code) for i in range(10)]
        runner = p.start_runner("a")
        wait_until("validation", lambda: p.get(p.prof, "/api/courses/c/assignments/quick")
                   ["validation"] == "ready", 120)
        waits = []
        for i in range(latency_jobs):
            sid = p.submit(students[i % 10], "quick", GOOD)
            wait_until("a grade", lambda sid=sid: _pending(p) == 0, 120, 0.05)
            with p.sessions() as s:
                job = s.scalars(select(Job).where(Job.submission_id == sid)).one()
                assert job.published_at is not None and job.claimed_at is not None
                waits.append((job.claimed_at - job.published_at).total_seconds() * 1000)
        p.kill(runner)
        ids = [p.submit(students[i % 10], "quick", GOOD) for i in range(burst)]
        start = time.monotonic()
        p.start_runner("b")
        p.start_runner("c")
        wait_until(f"{burst} gradings", lambda: _pending(p) == 0, 3600, 1)
        elapsed = time.monotonic() - start
        with p.sessions() as s:
            graded = s.scalar(select(func.count()).select_from(Submission).where(
                Submission.id.in_(ids), Submission.status == "graded"))
            attempts = s.scalar(select(func.max(Job.attempts)).where(Job.submission_id.in_(ids)))
        waits.sort()
        return {"broker": label, "p50_ms": statistics.median(waits),
                "p95_ms": waits[int(0.95 * (len(waits) - 1))], "max_ms": waits[-1],
                "burst": burst, "graded": graded, "max_attempts": attempts,
                "seconds": elapsed, "per_min": burst / elapsed * 60}
    finally:
        p.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--burst", type=int, default=500)
    ap.add_argument("--latency-jobs", type=int, default=20)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        embedded = Path(tmp) / "embedded"
        embedded.mkdir()
        rows.append(measure("embedded (SQLite)", f"sqla+sqlite:///{embedded / 'broker.sqlite'}",
                            embedded, burst=args.burst, latency_jobs=args.latency_jobs))
        url = "redis://127.0.0.1:6379/0"
        prefix = f"paragrade-bench-{uuid.uuid4().hex[:8]}:"
        on_redis = Path(tmp) / "redis"
        on_redis.mkdir()
        rows.append(measure("Redis", url, on_redis, burst=args.burst,
                            latency_jobs=args.latency_jobs, key_prefix=prefix))
        r = redis.Redis.from_url(url)
        for key in r.scan_iter(f"{prefix}*"):
            r.delete(key)
    publish("queue_throughput", rows, {
        "broker": "broker", "p50_ms": "queue latency p50 (ms) %.0f", "p95_ms": "p95 (ms) %.0f",
        "max_ms": "max (ms) %.0f", "burst": "burst", "graded": "graded",
        "max_attempts": "max attempts", "seconds": "drain (s) %.0f",
        "per_min": "jobs/min (2 runners) %.0f"})


if __name__ == "__main__":
    main()
