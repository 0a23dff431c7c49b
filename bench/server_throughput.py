"""Figure 3: server throughput and latency on the real PostgreSQL, through real HTTP.

Creates a scratch database (`paragrade_bench` on 127.0.0.1:5432, user postgres), migrates it, seeds
one course with t1 imported, STUDENTS students and STORED stored submissions (most of them graded,
with reports stored through the jobs service, so the leaderboard has real work), then runs the
server with uvicorn in a subprocess on a free port and drives it with httpx clients in threads:

* leaderboard latency (`GET .../leaderboard`), one client, then CLIENTS clients;
* the leaderboard page (HTML, a browser session), one client;
* upload latency (`POST .../submissions`, multipart), one client;
* upload throughput: CLIENTS clients uploading for --seconds; submissions accepted per minute.

"per minute" is responses with the expected status (200, or 201 = submission accepted) per minute
of the phase; "server CPU/req" is the uvicorn process's user+system CPU time per request (the
database's CPU is not in it). Every upload is distinct (a comment with a counter), so each one
writes a new artifact. No runner runs: uploads stay queued. The clients, the server and PostgreSQL
share the machine's cores, so the figures are for the whole box. The database is dropped at the
end (unless --keep). Takes about 2 minutes (seeding ~35 s).

Usage: .venv/bin/python -m bench.server_throughput [--seconds 60] [--clients 8]
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psycopg

from bench.common import publish

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
DB = "paragrade_bench"
URL = f"postgresql+psycopg://postgres@127.0.0.1:5432/{DB}"
RUNNER_TOKEN = "bench-runner-secret-1234"
COURSE, SLUG = "th", "t1-multiprocessing"
PACKAGE = "treasure-hunt/t1-multiprocessing"
STUDENTS = 200
STORED = 10_000
GRADED_SHARE = 0.8  # of the stored submissions, graded with a stored report
PASSED_SHARE = 0.7  # of the graded ones, passed (the rest failed)
QUEUED_SHARE = 0.02  # still queued; the remainder ended in a platform error


# database --------------------------------------------------------------------------------------
def recreate_db() -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB}")


def pg_version() -> str:
    with psycopg.connect(PG_ADMIN, connect_timeout=5) as conn:
        return conn.info.parameter_status("server_version") or "?"


def drop_db() -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")


def report(rng: random.Random, *, passed: bool) -> Any:
    """A well-formed GradeReport (as a runner would send), with a random speedup when passed."""
    from runners.protocol import (
        Environment,
        GradeReport,
        ScalingPoint,
        SpeedupFigure,
        TestOutcome,
        TestResult,
        Verdict,
    )

    med = round(rng.uniform(0.9, 3.6), 3)
    half = round(rng.uniform(0.03, 0.3), 3)
    lo, hi = med - half, med + half
    verdict = Verdict.PASSED if passed else Verdict.FAILED
    env = Environment(hostname="h", cpu_model="cpu", logical_cpus=2, memory_mb=1024,
                      core_set=[0, 1], core_set_enforced=True, backend="bwrap", sandboxed=True,
                      isolation=[], versions={"python": "3.11"}, paragrade_version="0")
    tests = [TestResult(name=f"hidden/test_hidden.py::test_{i}",
                        outcome=TestOutcome.PASSED if passed or i else TestOutcome.FAILED,
                        verdict=Verdict.PASSED if passed or i else Verdict.FAILED,
                        message="" if passed or i else "wrong answer", hidden=True, weight=1,
                        duration_s=0.1) for i in range(4)]
    return GradeReport(
        assignment=f"{COURSE}/{SLUG}", assignment_version="1.0.0", verdict=verdict, summary="s",
        tests=tests, score=90 if passed else 45, max_score=100, test_points=60 if passed else 45,
        performance_points=30 if passed else 0,
        speedup=SpeedupFigure(median=med, ci_low=lo, ci_high=hi, baseline_median_s=0.3,
                              submission_median_s=0.3 / med, repetitions=10) if passed else None,
        scaling=[ScalingPoint(workers=2, speedup=med, efficiency=med / 2, ci_low=lo, ci_high=hi,
                              submission_median_s=0.2, karp_flatt=0.1)] if passed else [],
        serial_fraction=0.1, amdahl_serial_fraction=0.1, notes=[], output_excerpt="", seed=1,
        environment=env, started_at="2026-11-22T00:00:00+00:00", wall_time_s=1, timed_time_s=0.5)


def seed(artifacts: Path) -> dict[str, Any]:
    """Instructor, course, t1, students with tokens, STORED submissions; returns the tokens."""
    from server import migrate, security
    from server.db import make_engine, session_factory
    from server.models import Enrollment, Job, Submission, User, now
    from server.services import artifacts as artifact_service
    from server.services import assignments, courses, jobs, users
    from server.settings import REPO_ROOT

    migrate.upgrade(URL)
    engine = make_engine(URL)
    rng = random.Random(7)
    hashed = security.hash_password("benchpass123")  # argon2 once, shared by every account
    reference = (REPO_ROOT / "assignments" / PACKAGE / "reference" / "solution.py").read_bytes()
    with session_factory(engine)() as s:
        prof = User(email="prof@uni.edu", name="Prof", password_hash=hashed, is_instructor=True)
        s.add(prof)
        s.flush()
        course = courses.create(session=s, actor=prof, slug=COURSE, title="Treasure hunt")
        version = assignments.import_files(
            session=s, actor=prof, course=course, role="instructor", artifacts_root=artifacts,
            files=assignments.read_folder(REPO_ROOT / "assignments" / PACKAGE))
        version.status = "ready"  # as a runner's validation would leave it (no runner here)
        students = [User(email=f"s{i:03d}@uni.edu", name=f"Student {i}", password_hash=hashed)
                    for i in range(STUDENTS)]
        s.add_all(students)
        s.flush()
        s.add_all([Enrollment(user_id=u.id, course_id=course.id, role="student",
                              alias=f"s{i:03d}") for i, u in enumerate(students)])
        tokens = [users.issue_token(session=s, user=u) for u in students]
        prof_token = users.issue_token(session=s, user=prof)
        s.commit()

        archive = assignments.bundle({"solution.py": reference})
        sha = artifact_service.store(session=s, root=artifacts, data=archive, kind="submission")
        start = now() - timedelta(days=30)
        subs = [Submission(user_id=students[i % STUDENTS].id,
                           assignment_id=version.assignment_id, version_id=version.id,
                           archive_sha256=sha, filenames=["solution.py"],
                           created_at=start + timedelta(seconds=250 * i))
                for i in range(STORED)]
        s.add_all(subs)
        s.flush()
        n_graded = int(STORED * GRADED_SHARE)
        n_queued = int(STORED * QUEUED_SHARE)
        fates = ["graded"] * n_graded + ["queued"] * n_queued \
            + ["error"] * (STORED - n_graded - n_queued)
        rng.shuffle(fates)
        s.add_all([Job(submission_id=sub.id, queue="cpu",
                       state="queued" if fate == "queued" else "done",
                       attempts=0 if fate == "queued" else 1)
                   for sub, fate in zip(subs, fates, strict=True)])
        s.commit()
        for k, (sub, fate) in enumerate(zip(subs, fates, strict=True)):
            if fate == "graded":
                jobs.store_report(session=s, sub=sub,
                                  report=report(rng, passed=rng.random() < PASSED_SHARE))
            elif fate == "error":
                sub.status, sub.verdict, sub.counts_for_quota = "error", jobs.PLATFORM_ERROR, False
            if k % 500 == 499:
                s.commit()
        s.commit()
    with engine.connect() as conn:  # fresh statistics, as autovacuum would have by now
        conn.exec_driver_sql("ANALYZE")
        conn.commit()
    engine.dispose()
    return {"students": tokens, "prof": prof_token, "reference": reference}


# server ----------------------------------------------------------------------------------------
def serve(port: int, artifacts: Path) -> None:
    """The server as `paragrade serve` runs it (uvicorn, one process), over the bench database."""
    import uvicorn

    from server.main import create_app
    from server.settings import REPO_ROOT, ServerSettings

    # Every upload is published to the embedded broker (no runner consumes them here).
    settings = ServerSettings(database_url=URL, artifacts_dir=artifacts,
                              assignments_dir=REPO_ROOT / "assignments",
                              runner_token=RUNNER_TOKEN,
                              broker_url=f"sqla+sqlite:///{artifacts.parent / 'broker.sqlite'}")
    uvicorn.run(create_app(settings), host="127.0.0.1", port=port, log_level="warning")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(artifacts: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bench.server_throughput", "--serve",
                             str(port), "--artifacts", str(artifacts)])
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.terminate()
    raise SystemExit("server did not become ready in 60 s")


# load ------------------------------------------------------------------------------------------
Request = Callable[[httpx.Client, int, int], httpx.Response]  # (client, worker, i)


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drive(base: str, request: Request, *, clients: int, expect: int, server_pid: int,
          count: int | None = None, seconds: float | None = None) -> dict[str, Any]:
    """`clients` threads, each with its own keep-alive connection, sending `request` until
    `count` requests each or `seconds` have passed; latencies of the expected responses and
    the server process's CPU time per request."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients
    barrier = threading.Barrier(clients + 1)
    stop_at: list[float] = [0.0]

    def worker(w: int) -> None:
        with httpx.Client(base_url=base, timeout=60) as c:
            barrier.wait()
            i = 0
            while (count is None or i < count) and (seconds is None
                                                    or time.perf_counter() < stop_at[0]):
                t = time.perf_counter()
                r = request(c, w, i)
                dt = time.perf_counter() - t
                if r.status_code == expect:
                    latencies[w].append(dt)
                else:
                    errors[w] += 1
                    if errors[w] <= 3:
                        print(f"  unexpected {r.status_code}: {r.text[:200]}", file=sys.stderr)
                i += 1

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(clients)]
    for t in threads:
        t.start()
    cpu0, t0 = cpu_s(server_pid), time.perf_counter()
    stop_at[0] = t0 + (seconds or 0)
    barrier.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    cpu = cpu_s(server_pid) - cpu0
    lat = np.array([x for per in latencies for x in per]) * 1e3
    return {"clients": clients, "requests": int(lat.size), "errors": sum(errors),
            "seconds": elapsed, "per_min": lat.size / elapsed * 60,
            "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
            "mean_ms": float(lat.mean()),
            "server_cpu_ms": cpu / (lat.size + sum(errors)) * 1e3}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--seconds", type=float, default=60, help="upload throughput phase length")
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients")
    ap.add_argument("--requests", type=int, default=300, help="requests per latency phase")
    ap.add_argument("--keep", action="store_true", help="keep the database afterwards (not the artifacts)")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--artifacts", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.artifacts)
        return

    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="paragrade-bench-"))
    artifacts = tmp / "artifacts"
    proc = None
    try:
        recreate_db()
        t = time.perf_counter()
        world = seed(artifacts)
        seed_s = time.perf_counter() - t
        print(f"seeded {STUDENTS} students, {STORED} submissions in {seed_s:.1f} s",
              file=sys.stderr)
        proc, base = start_server(artifacts)
        prof = {"Authorization": f"Bearer {world['prof']}"}
        assignment = f"/api/courses/{COURSE}/assignments/{SLUG}"
        r = httpx.patch(base + assignment, json={"quota_count": 10_000}, headers=prof)
        assert r.status_code == 200, r.text
        students = [{"Authorization": f"Bearer {tok}"} for tok in world["students"]]
        reference: bytes = world["reference"]

        uploads, clients = itertools.count(), int(args.clients)

        def student(w: int, i: int) -> dict[str, str]:  # workers spread over the students
            return students[(i + w * STUDENTS // clients) % STUDENTS]

        def board(c: httpx.Client, w: int, i: int) -> httpx.Response:
            return c.get(f"{assignment}/leaderboard", headers=student(w, i))

        # The leaderboard page (HTML) as a logged-in student's browser asks for it.
        login = httpx.post(base + "/login", data={"email": "s000@uni.edu",
                                                  "password": "benchpass123"})
        assert login.status_code == 303, login.text
        cookie = {"Cookie": "paragrade_session=" + login.cookies["paragrade_session"]}

        def board_page(c: httpx.Client, w: int, i: int) -> httpx.Response:
            return c.get(f"/c/{COURSE}/{SLUG}/leaderboard", headers=cookie)

        def upload(c: httpx.Client, w: int, i: int) -> httpx.Response:
            body = reference + f"\n# upload {next(uploads)}\n".encode()  # each one distinct
            return c.post(f"{assignment}/submissions", headers=student(w, i),
                          files=[("files", ("solution.py", body))])

        n, pid = args.requests, proc.pid
        with httpx.Client(base_url=base) as c:
            entries = len(board(c, 0, 0).json())
        drive(base, board, clients=1, expect=200, count=20, server_pid=pid)  # warm-up
        rows = [{"endpoint": "leaderboard",
                 **drive(base, board, clients=1, expect=200, count=n, server_pid=pid)},
                {"endpoint": "leaderboard",
                 **drive(base, board, clients=args.clients, expect=200,
                         count=max(1, n // args.clients), server_pid=pid)},
                {"endpoint": "leaderboard page (HTML)",
                 **drive(base, board_page, clients=1, expect=200, count=n, server_pid=pid)},
                {"endpoint": "upload",
                 **drive(base, upload, clients=1, expect=201, count=n, server_pid=pid)},
                {"endpoint": "upload",
                 **drive(base, upload, clients=args.clients, expect=201, seconds=args.seconds,
                         server_pid=pid)}]
        extra = {"students": STUDENTS, "stored_submissions": STORED,
                 "graded_share": GRADED_SHARE, "passed_share": PASSED_SHARE,
                 "leaderboard_entries": entries, "seed_s": seed_s,
                 "database": f"PostgreSQL {pg_version()}", "server": "uvicorn, 1 process",
                 "cores": len(os.sched_getaffinity(0)),
                 "total_s": time.perf_counter() - started}
        print(f"{STORED} stored submissions ({int(STORED * GRADED_SHARE)} graded), {STUDENTS} "
              f"students, leaderboard of {entries}; PostgreSQL, uvicorn (1 process), "
              f"{extra['cores']} cores")
        publish("server_throughput", rows, {
            "endpoint": "endpoint", "clients": "clients", "requests": "requests",
            "errors": "errors", "per_min": "per minute %.0f", "p50_ms": "p50 (ms) %.1f",
            "p99_ms": "p99 (ms) %.1f", "server_cpu_ms": "server CPU/req (ms) %.1f"}, extra=extra)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
        if not args.keep:
            drop_db()


if __name__ == "__main__":
    main()
