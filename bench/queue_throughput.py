"""Queue latency (publish → a runner claims the job) and burst throughput, per broker.

For each broker (the embedded SQLite one and Redis on 127.0.0.1:6379): a real server, real
runner processes, the test package `quick` (graded in about a second, no timing).
- latency: one runner, jobs submitted one at a time (each waits for the previous grade): the
  time from the job's publication to its claim by the idle runner, which is what the queue adds.
- burst: BURST submissions at once, then two runners; wall time until every one is graded.
- with --deadline N (instead of the above): the deadline burst. N submissions queued, two runners
  on disjoint cores (PARAGRADE_CPUS 0 and 1), a redis-server of the bench's own; when half are
  graded one runner is SIGKILLed mid-job (a replacement starts on its core) and Redis restarts
  empty (the reaper publishes the lost messages again). Sampled every 0.25 s: how many live
  runners hold a claimed job, i.e. how busy the fleet is until the queue drains; at the end,
  submissions lost (not graded) and graded twice (two finished jobs).

    .venv/bin/python -m bench.queue_throughput [--burst 500] [--latency-jobs 20]
    .venv/bin/python -m bench.queue_throughput --deadline 1000
    .venv/bin/python -m bench.queue_throughput --deadline 24 --packages treasure-hunt/t1-multiprocessing …

--packages submits the named shipped packages' references in turn instead of `quick` (each runner
then has one core where the packages ask for two: the gradings say so, and only the busy share,
not the speedups, is the point).
"""

from __future__ import annotations

import argparse
import functools
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

import redis
from sqlalchemy import func, select

from bench.common import publish
from runners import package
from server.models import Job, Submission
from server.settings import REPO_ROOT
from tests.server.live import Platform, free_port, redis_server, wait_until

PACKAGES = REPO_ROOT / "tests" / "fixtures" / "queue"
SHIPPED = REPO_ROOT / "assignments"
GOOD = (PACKAGES / "quick" / "reference" / "solution.py").read_bytes()


def _validated(p: Platform, slug: str) -> bool:
    return bool(p.get(p.prof, f"/api/courses/c/assignments/{slug}")["validation"] == "ready")


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
            wait_until("a grade", lambda: _pending(p) == 0, 120, 0.05)
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


def _references(paths: list[str]) -> list[tuple[str, bytes]]:
    """(slug, reference entry file) of each shipped package named course/slug."""
    out = []
    for path in paths:
        a = package.load(SHIPPED / path)
        out.append((a.manifest.slug, (a.folder("reference") / a.manifest.entry.file).read_bytes()))
    return out


def deadline(tmp: Path, *, n: int, students: int = 50,
             shipped: list[str] | None = None) -> dict[str, object]:
    """The deadline burst (module docstring): busy share, drain time, lost and doubled.

    `shipped`: course/slug of shipped packages, submitted in turn (their references) instead of
    `quick`."""
    port, binary = free_port(), shutil.which("redis-server")
    assert binary is not None, "the deadline burst needs a redis-server binary"
    server = redis_server(binary, port, tmp)
    subs = _references(shipped) if shipped else [("quick", GOOD)]
    p = Platform(tmp, f"redis://127.0.0.1:{port}/0",
                 assignments_dir=SHIPPED if shipped else PACKAGES, lease_s=10)
    try:
        code = p.course(*(shipped or ["quick"]))
        for slug, _ in subs:
            p.http.patch(f"/api/courses/c/assignments/{slug}", json={"quota_count": 10_000},
                         headers=p.prof).raise_for_status()
        who = [p.student(f"s{i}", code) for i in range(students)]
        checker = p.start_runner("validator")
        for slug, _ in subs:
            wait_until(f"{slug}'s validation", functools.partial(_validated, p, slug), 900, 1)
        p.kill(checker)
        ids = [p.submit(who[i % students], *subs[i % len(subs)]) for i in range(n)]
        alive = {"a": p.start_runner("a", env={"PARAGRADE_CPUS": "0"}),
                 "b": p.start_runner("b", env={"PARAGRADE_CPUS": "1"})}
        samples: list[tuple[float, int]] = []  # (seconds since start, busy live runners)
        stop = threading.Event()

        def sample() -> None:  # live runners holding a claimed job, every 0.25 s
            while not stop.wait(0.25):
                names = [k for k, proc in alive.items() if proc.poll() is None]
                with p.sessions() as s:
                    busy = s.scalar(select(func.count(func.distinct(Job.runner))).where(
                        Job.state == "claimed", Job.runner.in_(names))) or 0
                samples.append((time.monotonic() - start, int(busy)))

        start = time.monotonic()
        threading.Thread(target=sample, daemon=True).start()
        wait_until("half the burst", lambda: _pending(p) <= n // 2, 3600, 0.2)
        wait_until("runner b busy", lambda: _claimed_by(p, "b"), 60, 0.02)
        p.kill(alive.pop("b"))  # mid-job: its job waits out the lease, then runs again
        alive["b2"] = p.start_runner("b2", env={"PARAGRADE_CPUS": "1"})
        server.terminate()
        server.wait(10)
        server = redis_server(binary, port, tmp)  # empty: every queued message is gone
        restarted = time.monotonic() - start
        wait_until(f"{n} gradings", lambda: _pending(p) == 0, 7200, 0.5)
        elapsed = time.monotonic() - start
        stop.set()
        with p.sessions() as s:
            graded = s.scalar(select(func.count()).select_from(Submission).where(
                Submission.id.in_(ids), Submission.status == "graded")) or 0
            finished = s.execute(select(Job.submission_id, func.count()).where(
                Job.submission_id.in_(ids), Job.state == "done").group_by(Job.submission_id)).all()
        twice = sum(1 for _, k in finished if k > 1)

        def busy(lo: float, hi: float) -> float:
            got = [b for t, b in samples if lo <= t < hi]
            return statistics.fmean(got) / 2 if got else 0.0

        return {"submissions": n, "graded": graded, "lost": n - graded, "twice": twice,
                "drain_s": elapsed, "fault_at_s": restarted,
                "busy": busy(0, elapsed), "busy_before": busy(0, restarted),
                "busy_after": busy(restarted, elapsed),
                "per_min": n / elapsed * 60}
    finally:
        p.close()
        server.terminate()
        server.wait(10)


def _claimed_by(p: Platform, runner: str) -> bool:
    with p.sessions() as s:
        return bool(s.scalar(select(func.count()).select_from(Job).where(
            Job.state == "claimed", Job.runner == runner)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--burst", type=int, default=500)
    ap.add_argument("--latency-jobs", type=int, default=20)
    ap.add_argument("--deadline", type=int, default=0,
                    help="run the deadline burst with this many submissions instead")
    ap.add_argument("--packages", nargs="+", metavar="COURSE/SLUG",
                    help="the deadline burst submits these shipped packages' references in "
                         "turn instead of the test package `quick`")
    args = ap.parse_args()
    if args.deadline:
        with tempfile.TemporaryDirectory() as tmp:
            row = deadline(Path(tmp), n=args.deadline, shipped=args.packages)
        row["packages"] = ", ".join(args.packages or ["quick"])
        publish("deadline_burst", [row], {"packages": "packages",
            "submissions": "submissions", "graded": "graded", "lost": "lost",
            "twice": "graded twice", "drain_s": "drain (s) %.0f",
            "fault_at_s": "runner killed + Redis restarted at (s) %.0f",
            "busy": "runners busy (share of the drain) %.3f",
            "busy_before": "before the faults %.3f", "busy_after": "after %.3f",
            "per_min": "jobs/min %.0f"})
        return
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
