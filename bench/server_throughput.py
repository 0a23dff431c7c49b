"""Figure 3: server throughput and latency on the real PostgreSQL (or SQLite), through real HTTP.

Creates a scratch database (`paragrade_bench` on 127.0.0.1:5432, user postgres; with
--database sqlite a file of its own), migrates it, seeds
one course with t1 imported, --students students and --stored stored submissions (most of them
graded, with reports stored through the grading service, copied in SQL beyond 10 000, so the
leaderboard has real work), then runs the server with uvicorn in a subprocess on a free port
(with --broker, the embedded SQLite broker or Redis) and drives it with httpx clients in threads:

* leaderboard latency (`GET .../leaderboard`), one client, then CLIENTS clients;
* the leaderboard page (HTML, a browser session), one client;
* the class's statistics (`GET .../stats`, and its page), the instructor, one client;
* the staff's submissions list (`GET .../submissions`, every submission with its queue place),
  the instructor, one client;
* upload latency (`POST .../submissions`, multipart), one client;
* upload throughput: CLIENTS clients uploading for --seconds; submissions accepted per second;
* with --sse N: the server's CPU and the database's transactions per second while nothing
  changes, without and with N browsers watching the leaderboard's live updates, and the
  leaderboard's latency meanwhile.

With --before REV the same phases run first against the server of commit REV (a git worktree),
over the same database: today's code and the earlier one side by side in one run.

"per second" counts responses with the expected status (200, or 201 = submission accepted);
"server CPU/req" is the uvicorn processes' user+system CPU time per request (the database's CPU
is not in it). --workers 1,2 measures the server as one process and as two on one listening
socket (`paragrade serve --workers 2`), side by side. Every upload is distinct
(a comment with a counter), so each one writes a new artifact. No runner runs: uploads stay
queued. The clients, the server and PostgreSQL share the machine's cores, so the figures are for
the whole box. The database is dropped at the end (unless --keep).

Usage: .venv/bin/python -m bench.server_throughput [--seconds 60] [--clients 8] [--stored N]
       [--students N] [--broker embedded|redis] [--sse N] [--before REV] [--workers 1,2]
       [--database postgresql|sqlite]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import numpy as np
import psycopg

from bench.common import publish

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from server.models import AssignmentVersion, Submission, User

REPO = Path(__file__).resolve().parent.parent
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
DB = "paragrade_bench"
URL = f"postgresql+psycopg://postgres@127.0.0.1:5432/{DB}"
RUNNER_TOKEN = "bench-runner-secret-1234"
COURSE, SLUG = "th", "t1-multiprocessing"
PACKAGE = "treasure-hunt/t1-multiprocessing"
STUDENTS = 200  # defaults; --students and --stored change them
STORED = 10_000
SEEDED = 10_000  # seeded through the services; more are copies of these made in SQL
GRADED_SHARE = 0.8  # of the stored submissions, graded with a stored report
PASSED_SHARE = 0.7  # of the graded ones, passed (the rest failed)
QUEUED_SHARE = 0.02  # still queued; the remainder ended in a platform error


# database --------------------------------------------------------------------------------------
def recreate_db() -> None:
    if URL.startswith("sqlite:///"):
        Path(URL.removeprefix("sqlite:///")).unlink(missing_ok=True)
        return
    with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB}")


def db_version() -> str:
    if URL.startswith("sqlite:///"):
        return f"SQLite {sqlite3.sqlite_version}"
    with psycopg.connect(PG_ADMIN, connect_timeout=5) as conn:
        return f"PostgreSQL {conn.info.parameter_status('server_version') or '?'}"


def drop_db() -> None:
    if URL.startswith("sqlite:///"):
        Path(URL.removeprefix("sqlite:///")).unlink(missing_ok=True)
        return
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


def seed(artifacts: Path, *, students_n: int, stored: int) -> dict[str, Any]:
    """Instructor, course, t1, students with tokens, `stored` submissions; returns the tokens.

    Up to SEEDED submissions go through the services (reports stored as a runner's would be);
    beyond that, the database copies them (each copy shifted in time, with its own jobs, report,
    tests and scaling points), so 100 000 take seconds, not minutes."""
    from server import migrate, security
    from server.db import make_engine, session_factory
    from server.settings import REPO_ROOT

    migrate.upgrade(URL)
    engine = make_engine(URL)
    rng = random.Random(7)
    hashed = security.hash_password("benchpass123")  # argon2 once, shared by every account
    reference = (REPO_ROOT / "assignments" / PACKAGE / "reference" / "solution.py").read_bytes()
    with session_factory(engine)() as s:
        version, students, tokens, prof_token = _seed_class(s, artifacts, students_n, hashed)
        base = min(stored, SEEDED)
        subs = _seed_submissions(s, artifacts, version, students, reference, base)
        fates = _fates(rng, base)
        _seed_jobs(s, rng, subs, fates)
        _seed_outcomes(s, rng, subs, fates)
    with engine.connect() as conn:
        for copy in range(1, -(-stored // base)):
            replicate(conn, copy, base, min(base, stored - copy * base))
        conn.commit()
    with engine.connect() as conn:  # fresh statistics, as autovacuum would have by now
        conn.exec_driver_sql("ANALYZE")
        conn.commit()
    engine.dispose()
    return {"students": tokens, "prof": prof_token, "reference": reference}


def _seed_class(s: Session, artifacts: Path, students_n: int, hashed: str
                ) -> tuple[AssignmentVersion, list[User], list[str], str]:
    """The instructor, the course with t1 ready, its students: (t1, students, tokens, instructor's)."""
    from server.models import Enrollment, User
    from server.services.packages import assignments
    from server.services.people import courses, users
    from server.settings import REPO_ROOT

    prof = User(email="prof@uni.edu", name="Prof", password_hash=hashed, is_instructor=True)
    s.add(prof)
    s.flush()
    course = courses.create(session=s, actor=prof, slug=COURSE, title="Treasure hunt")
    version = assignments.import_files(
        session=s, actor=prof, course=course, role="instructor", artifacts_root=artifacts,
        files=assignments.read_folder(REPO_ROOT / "assignments" / PACKAGE))
    version.status = "ready"  # as a runner's validation would leave it (no runner here)
    students = [User(email=f"s{i:03d}@uni.edu", name=f"Student {i}", password_hash=hashed)
                for i in range(students_n)]
    s.add_all(students)
    s.flush()
    s.add_all([Enrollment(user_id=u.id, course_id=course.id, role="student",
                          alias=f"s{i:03d}") for i, u in enumerate(students)])
    tokens = [users.issue_token(session=s, user=u) for u in students]
    prof_token = users.issue_token(session=s, user=prof)
    s.commit()
    return version, students, tokens, prof_token


def _seed_submissions(s: Session, artifacts: Path, version: AssignmentVersion,
                      students: list[User], reference: bytes, base: int) -> list[Submission]:
    """`base` uploads of the reference, the students' in turn, one every 250 s from 30 days ago."""
    from server.models import Submission, now
    from server.services.packages import assignments
    from server.services.records import artifacts as artifact_service

    archive = assignments.bundle({"solution.py": reference})
    sha = artifact_service.store(session=s, root=artifacts, data=archive, kind="submission")
    start = now() - timedelta(days=30)
    subs = [Submission(user_id=students[i % len(students)].id,
                       assignment_id=version.assignment_id, version_id=version.id,
                       archive_sha256=sha, filenames=["solution.py"],
                       created_at=start + timedelta(seconds=250 * i))
            for i in range(base)]
    s.add_all(subs)
    s.flush()
    return subs


def _fates(rng: random.Random, base: int) -> list[str]:
    """How each of `base` submissions ended, shuffled: graded, still queued, or a platform error."""
    n_graded = int(base * GRADED_SHARE)
    n_queued = int(base * QUEUED_SHARE)
    fates = ["graded"] * n_graded + ["queued"] * n_queued \
        + ["error"] * (base - n_graded - n_queued)
    rng.shuffle(fates)
    return fates


def _seed_jobs(s: Session, rng: random.Random, subs: list[Submission], fates: list[str]) -> None:
    """Each submission's grading job, queued or done as its fate says."""
    from server.models import Job

    jobs = []
    for sub, fate in zip(subs, fates, strict=True):
        job = Job(submission_id=sub.id, queue="cpu", created_at=sub.created_at,
                  state="queued" if fate == "queued" else "done",
                  attempts=0 if fate == "queued" else 1)
        if fate != "queued":  # its queue wait and grading time, as the statistics read them
            job.claimed_at = sub.created_at + timedelta(seconds=rng.expovariate(1 / 20))
            job.finished_at = job.claimed_at + timedelta(seconds=rng.uniform(8, 40))
        jobs.append(job)
    s.add_all(jobs)
    s.commit()


def _seed_outcomes(s: Session, rng: random.Random, subs: list[Submission],
                   fates: list[str]) -> None:
    """The graded submissions' reports, stored through the grading service; the errors marked."""
    from server.services.fleet import kinds
    from server.services.grades import grading

    for k, (sub, fate) in enumerate(zip(subs, fates, strict=True)):
        if fate == "graded":
            grading.store_report(session=s, sub=sub,
                                 report=report(rng, passed=rng.random() < PASSED_SHARE))
        elif fate == "error":
            sub.status, sub.verdict, sub.counts_for_quota = "error", kinds.PLATFORM_ERROR, False
        if k % 500 == 499:
            s.commit()
    s.commit()


def replicate(conn: Any, copy: int, base: int, n: int) -> None:
    """Copy the first `n` seeded submissions (ids 1..n) with their jobs, reports, tests and
    scaling points as copy number `copy` (submission ids shifted by copy × base, an hour later
    per copy)."""
    sub_off, rep_off = copy * base, copy * 10 * base
    conn.exec_driver_sql(f"""
        INSERT INTO submissions (id, user_id, assignment_id, version_id, archive_sha256, filenames,
            status, verdict, score, late, counts_for_quota, created_at, started_at, finished_at)
        SELECT id + {sub_off}, user_id, assignment_id, version_id, archive_sha256, filenames,
            status, verdict, score, late, counts_for_quota, created_at + interval '{copy} hour',
            started_at, finished_at + interval '{copy} hour'
        FROM submissions WHERE id <= {n}""")
    conn.exec_driver_sql(f"""
        INSERT INTO jobs (kind, submission_id, version_id, queue, state, attempts, created_at,
            claimed_at, finished_at, priority, time_limit_s)
        SELECT kind, submission_id + {sub_off}, version_id, queue, state, attempts,
            created_at + interval '{copy} hour', claimed_at + interval '{copy} hour',
            finished_at + interval '{copy} hour', priority, time_limit_s
        FROM jobs WHERE submission_id <= {n}""")
    conn.exec_driver_sql(f"""
        INSERT INTO grade_reports (id, submission_id, verdict, score, max_score, speedup_median,
            speedup_ci_low, speedup_ci_high, serial_fraction, credit_status, credited_speedup,
            review, report, created_at)
        SELECT id + {rep_off}, submission_id + {sub_off}, verdict, score, max_score,
            speedup_median, speedup_ci_low, speedup_ci_high, serial_fraction, credit_status,
            credited_speedup, review, report, created_at
        FROM grade_reports WHERE submission_id <= {n}""")
    for table, cols in (("test_results", "name, outcome, verdict, message, hidden, weight"),
                        ("scaling_points", "workers, speedup, efficiency, ci_low, ci_high, "
                                           "karp_flatt")):
        conn.exec_driver_sql(f"""
            INSERT INTO {table} (report_id, {cols})
            SELECT t.report_id + {rep_off}, {', '.join('t.' + c.strip() for c in cols.split(','))}
            FROM {table} t JOIN grade_reports r ON r.id = t.report_id
            WHERE r.submission_id <= {n}""")
    for table in ("submissions", "grade_reports", "jobs", "test_results", "scaling_points"):
        conn.exec_driver_sql(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                             f"(SELECT max(id) FROM {table}))")


# server ----------------------------------------------------------------------------------------
SERVE = f"""
import os, sys, uvicorn
from pathlib import Path
port, artifacts, broker = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
workers, url = int(sys.argv[4]), sys.argv[5]
os.environ.update(PARAGRADE_SERVER_DATABASE_URL=url, PARAGRADE_SERVER_ARTIFACTS_DIR=str(artifacts),
                  PARAGRADE_SERVER_ASSIGNMENTS_DIR=str(Path("assignments").resolve()),
                  PARAGRADE_SERVER_RUNNER_TOKEN={RUNNER_TOKEN!r},
                  PARAGRADE_SERVER_SECRET_KEY="bench-secret-key-0123456789",
                  PARAGRADE_SERVER_BROKER_URL=broker)
if workers == 1:
    from server.main import create_app
    uvicorn.run(create_app(), host="127.0.0.1", port=port, log_level="warning")
else:  # as `paragrade serve --workers N` serves (an earlier revision may not have it)
    from server.cli import serve_processes
    serve_processes("127.0.0.1", port, workers)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(source: Path, artifacts: Path, broker: str, workers: int = 1
                 ) -> tuple[subprocess.Popen[bytes], str]:
    """The server of the code in `source` (this checkout, or a worktree of an earlier commit)
    over the bench database: uvicorn, one process, or `workers` processes on one socket, as
    `paragrade serve --workers` runs them (a process group of their own)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVE, str(port), str(artifacts), broker,
                             str(workers), URL], cwd=source, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(source)})
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


def worktree(rev: str, into: Path) -> Path:
    """A checkout of commit `rev` beside this one (the code to compare with)."""
    subprocess.run(["git", "worktree", "add", "--detach", str(into), rev], cwd=REPO, check=True,
                   capture_output=True)
    return into


# load ------------------------------------------------------------------------------------------
Request = Callable[[httpx.Client, int, int], httpx.Response]  # (client, worker, i)


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process and its direct children have used so far."""
    total = 0.0
    for task in [str(pid), *Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{task}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def drive(base: str, request: Request, *, clients: int, expect: int, server_pid: int,
          count: int | None = None, seconds: float | None = None, rate: float | None = None,
          timeout: float = 60) -> dict[str, Any]:
    """`clients` threads, each with its own keep-alive connection, sending `request` until
    `count` requests each or `seconds` have passed; latencies of the expected responses and
    the server process's CPU time per request.

    Without `rate` each client sends its next request as soon as the last one is answered (the
    server's most). With `rate`, requests are due at `rate` per second in all, spread evenly
    over the clients; a latency counts from when its request was due, so a client held up by a
    slow answer charges the wait to the requests it delayed (no coordinated omission)."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients
    start: dict[str, float] = {}  # the clock: t0, stop (t0 + seconds), the server's cpu then

    def go() -> None:
        """The clock starts once every client has its connection pool: building eight
        httpx.Clients (their TLS contexts) takes ≈ 0.2 s, which a clock started earlier charged
        to the first uploads due (the "phase start" p99 of an earlier benchmarks table)."""
        t0 = time.perf_counter()
        start.update(cpu=cpu_s(server_pid), t0=t0, stop=t0 + (seconds or 0))

    barrier = threading.Barrier(clients + 1, action=go)

    def worker(w: int) -> None:
        with httpx.Client(base_url=base, timeout=timeout) as c:
            barrier.wait()
            i = 0
            while (count is None or i < count) and (seconds is None
                                                    or time.perf_counter() < start["stop"]):
                t = time.perf_counter()
                if rate is not None:
                    t = start["t0"] + (i * clients + w) / rate  # when it is due
                    if t >= start["stop"]:
                        break
                    time.sleep(max(0.0, t - time.perf_counter()))
                try:
                    r = request(c, w, i)
                except httpx.TimeoutException:  # counted as an error, not a crash of the bench
                    errors[w] += 1
                    i += 1
                    continue
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
    barrier.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start["t0"]
    cpu = cpu_s(server_pid) - start["cpu"]
    lat = np.array([x for per in latencies for x in per]) * 1e3
    if lat.size == 0:
        lat = np.array([float("nan")])  # nothing answered in time: the errors say it
    return {"clients": clients, "offered_per_s": rate or "max", "requests": int(lat.size),
            "errors": sum(errors),
            "seconds": elapsed, "per_min": lat.size / elapsed * 60,
            "p50_ms": float(np.percentile(lat, 50)), "p95_ms": float(np.percentile(lat, 95)),
            "p99_ms": float(np.percentile(lat, 99)), "per_s": lat.size / elapsed,
            "mean_ms": float(lat.mean()),
            "server_cpu_ms": cpu / (lat.size + sum(errors)) * 1e3}


@contextlib.contextmanager
def watchers(base: str, path: str, headers: dict[str, str], n: int) -> Iterator[dict[str, int]]:
    """`n` browsers' EventSource streams on `path` (one event loop in a thread); yields their
    counts (connected, events) once all are connected."""
    seen = {"connected": 0, "events": 0}
    stop = threading.Event()

    async def one(client: httpx.AsyncClient) -> None:
        async with client.stream("GET", path, headers=headers) as r:
            seen["connected"] += 1
            async for line in r.aiter_lines():
                seen["events"] += line.startswith("data:")

    async def run() -> None:
        limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
        async with httpx.AsyncClient(base_url=base, timeout=None, limits=limits) as c:
            tasks = [asyncio.create_task(one(c)) for _ in range(n)]
            while not stop.is_set():
                await asyncio.sleep(0.1)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    thread = threading.Thread(target=asyncio.run, args=(run(),))
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while seen["connected"] < n and time.monotonic() < deadline:
            time.sleep(0.1)
        if seen["connected"] < n:  # measured all the same: how many got through is the figure
            print(f"only {seen['connected']} of {n} event streams connected in 60 s",
                  file=sys.stderr)
        yield seen
    finally:
        stop.set()
        thread.join(30)


def transactions() -> int:
    """Transactions the bench database has run so far (PostgreSQL's statistics)."""
    with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute("SELECT xact_commit + xact_rollback FROM pg_stat_database "
                           "WHERE datname = %s", (DB,)).fetchone()
    return int(row[0]) if row else 0


def quiet(pid: int, seconds: float) -> dict[str, float]:
    """What a server costs while nothing changes: its CPU and the database's transactions per
    second over `seconds`."""
    time.sleep(2.5)  # statistics of what came before are flushed
    cpu0, tx0, t0 = cpu_s(pid), transactions(), time.perf_counter()
    time.sleep(seconds)
    time.sleep(1.0)  # let PostgreSQL flush its counters (they lag up to a second)
    tx1 = transactions()
    elapsed = time.perf_counter() - t0
    return {"server_cpu_pct": (cpu_s(pid) - cpu0) / elapsed * 100,
            "db_tx_per_s": (tx1 - tx0) / elapsed}


def browser_session(base: str, email: str) -> dict[str, str]:
    """The Cookie header of a browser logged in as `email` (the page's own form and CSRF)."""
    with httpx.Client(base_url=base) as browser:
        form = re.search(r'name="csrf_token" value="([^"]+)"', browser.get("/login").text)
        assert form, "the login page has no CSRF field"
        login = browser.post("/login", data={"email": email, "password": "benchpass123",
                                             "csrf_token": form.group(1)})
        assert login.status_code == 303, login.text
        return {"Cookie": "paragrade_session=" + browser.cookies["paragrade_session"]}


@dataclass(frozen=True)
class _Requests:
    """The requests the phases send, each as `drive` calls it: (client, worker, i)."""

    board: Request  # the leaderboard (API), as a student
    board_page: Request  # the leaderboard page (HTML), as a logged-in student's browser
    stats: Request  # the class's statistics (API), as the instructor
    stats_page: Request  # the class's statistics page (HTML), the instructor's browser
    staff_list: Request  # the staff's submissions list (API), as the instructor
    upload: Request  # a distinct upload of the reference, as a student
    cookie: dict[str, str]  # the student's browser session (the live updates' watchers use it)


def _requests(base: str, label: str, world: dict[str, Any], clients: int) -> _Requests:
    """The phases' requests, once t1 takes any number of uploads and two browsers have logged in."""
    prof = {"Authorization": f"Bearer {world['prof']}"}
    assignment = f"/api/courses/{COURSE}/assignments/{SLUG}"
    r = httpx.patch(base + assignment, json={"quota_count": 10_000}, headers=prof)
    assert r.status_code == 200, r.text
    students = [{"Authorization": f"Bearer {tok}"} for tok in world["students"]]
    n_students, reference = len(students), world["reference"]
    uploads = itertools.count()

    def student(w: int, i: int) -> dict[str, str]:  # workers spread over the students
        return students[(i + w * n_students // clients) % n_students]

    def board(c: httpx.Client, w: int, i: int) -> httpx.Response:
        return c.get(f"{assignment}/leaderboard", headers=student(w, i))

    # The leaderboard page (HTML) as a logged-in student's browser asks for it.
    cookie = browser_session(base, "s000@uni.edu")

    def board_page(c: httpx.Client, w: int, i: int) -> httpx.Response:
        return c.get(f"/c/{COURSE}/{SLUG}/leaderboard", headers=cookie)

    # The class's statistics, as the instructor asks for them (API) and reads them (page).
    staff = browser_session(base, "prof@uni.edu")

    def stats(c: httpx.Client, w: int, i: int) -> httpx.Response:
        return c.get(f"{assignment}/stats", headers=prof)

    def stats_page(c: httpx.Client, w: int, i: int) -> httpx.Response:
        return c.get(f"/c/{COURSE}/{SLUG}/stats", headers=staff)

    def staff_list(c: httpx.Client, w: int, i: int) -> httpx.Response:
        return c.get(f"{assignment}/submissions", headers=prof)

    def upload(c: httpx.Client, w: int, i: int) -> httpx.Response:
        body = reference + f"\n# {label} upload {next(uploads)}\n".encode()  # all distinct
        return c.post(f"{assignment}/submissions", headers=student(w, i),
                      files=[("files", ("solution.py", body))])

    return _Requests(board=board, board_page=board_page, stats=stats, stats_page=stats_page,
                     staff_list=staff_list, upload=upload, cookie=cookie)


def _request_rows(base: str, send: _Requests, args: argparse.Namespace, pid: int
                  ) -> list[dict[str, Any]]:
    """The latency and throughput phases, after a warm-up: one row each."""
    n, clients = args.requests, int(args.clients)
    drive(base, send.board, clients=1, expect=200, count=10, server_pid=pid)  # warm-up
    drive(base, send.board_page, clients=1, expect=200, count=10, server_pid=pid)
    rows = [{"endpoint": "leaderboard (API)",
             **drive(base, send.board, clients=1, expect=200, count=n, server_pid=pid)},
            {"endpoint": "leaderboard (API)",
             **drive(base, send.board, clients=clients, expect=200,
                     count=max(1, n // clients), server_pid=pid)},
            {"endpoint": "leaderboard page (HTML)",
             **drive(base, send.board_page, clients=1, expect=200, count=n, server_pid=pid)},
            {"endpoint": "class statistics (API)",
             **drive(base, send.stats, clients=1, expect=200, count=max(1, n // 5),
                     server_pid=pid)},
            {"endpoint": "class statistics page (HTML)",
             **drive(base, send.stats_page, clients=1, expect=200, count=max(1, n // 5),
                     server_pid=pid)},
            {"endpoint": "the staff's submissions list (API)",
             **drive(base, send.staff_list, clients=1, expect=200, count=max(1, n // 20),
                     server_pid=pid)},
            {"endpoint": "upload",
             **drive(base, send.upload, clients=1, expect=201, count=n, server_pid=pid)},
            {"endpoint": "upload",
             **drive(base, send.upload, clients=clients, expect=201, seconds=args.seconds,
                     server_pid=pid)}]
    if args.rate:
        rows.append({"endpoint": "upload", **drive(
            base, send.upload, clients=clients, expect=201, seconds=args.seconds,
            rate=args.rate, server_pid=pid)})
    return rows


def _live_rows(base: str, send: _Requests, args: argparse.Namespace, pid: int
               ) -> list[dict[str, Any]]:
    """The idle server without, then with, `args.sse` browsers watching; the leaderboard meanwhile."""
    n = args.requests
    live = [{"watchers": 0, "connected": 0, **quiet(pid, args.quiet),
             **drive(base, send.board, clients=1, expect=200, count=n, server_pid=pid)}]
    with watchers(base, f"/c/{COURSE}/{SLUG}/leaderboard/events", send.cookie,
                  args.sse) as seen:
        row = {"watchers": args.sse, **quiet(pid, args.quiet),
               **drive(base, send.board, clients=1, expect=200, count=min(n, 10),
                       server_pid=pid, timeout=10)}
        live.append({**row, "connected": seen["connected"]})
    return live


def _stop_server(proc: subprocess.Popen[bytes]) -> None:
    """The server's process group ended: politely first, killed if it lingers."""
    os.killpg(proc.pid, signal.SIGTERM)  # uvicorn waits for open streams to end: not for ever
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    with contextlib.suppress(ProcessLookupError):  # what is left of the group, if anything
        os.killpg(proc.pid, signal.SIGKILL)


def measure(label: str, source: Path, artifacts: Path, world: dict[str, Any],
            args: argparse.Namespace, workers: int = 1
            ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every phase against the server of `source`: (request rows, live-update rows)."""
    proc, base = start_server(source, artifacts, args.broker_url, workers)
    try:
        send = _requests(base, label, world, int(args.clients))
        rows = _request_rows(base, send, args, proc.pid)
        live = _live_rows(base, send, args, proc.pid) if args.sse else []
        for row in rows + live:
            row["code"] = label
        return rows, live
    finally:
        _stop_server(proc)


def _parser() -> argparse.ArgumentParser:
    """The bench's options (see the module's docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--seconds", type=float, default=60, help="upload throughput phase length")
    ap.add_argument("--clients", type=int, default=8, help="concurrent clients")
    ap.add_argument("--requests", type=int, default=300, help="requests per latency phase")
    ap.add_argument("--stored", type=int, default=STORED, help="stored submissions")
    ap.add_argument("--students", type=int, default=STUDENTS, help="enrolled students")
    ap.add_argument("--broker", choices=("embedded", "redis"), default="embedded",
                    help="the server's broker: the embedded SQLite one or Redis on 127.0.0.1")
    ap.add_argument("--sse", type=int, default=0,
                    help="browsers watching the leaderboard's live updates (0: no such phase)")
    ap.add_argument("--quiet", type=float, default=20, help="seconds of the idle measurement")
    ap.add_argument("--before", help="also measure the server of this earlier commit, first")
    ap.add_argument("--keep", action="store_true", help="keep the database afterwards (not the artifacts)")
    ap.add_argument("--rate", type=float, default=0,
                    help="also uploads offered at this many per second in all (0: no such phase)")
    ap.add_argument("--workers", default="1",
                    help="server processes of today's code, or a list (1,2): each measured")
    ap.add_argument("--database", choices=("postgresql", "sqlite"), default="postgresql",
                    help="PostgreSQL on 127.0.0.1, or a SQLite file of the bench's own")
    return ap


def _publish(args: argparse.Namespace, rows: list[dict[str, Any]], live: list[dict[str, Any]],
             *, seed_s: float, started: float) -> None:
    """The setting's line, the requests' table and, with --sse, the live updates' table."""
    extra = {"students": args.students, "stored_submissions": args.stored,
             "graded_share": GRADED_SHARE, "passed_share": PASSED_SHARE, "seed_s": seed_s,
             "database": db_version(), "server": f"uvicorn, {args.workers} process(es)",
             "broker": args.broker, "cores": len(os.sched_getaffinity(0)),
             "total_s": time.perf_counter() - started, "live": live}
    print(f"{args.stored} stored submissions ({int(args.stored * GRADED_SHARE)} graded), "
          f"{args.students} students; {db_version()}, uvicorn ({args.workers} process(es)), "
          f"{args.broker} broker, "
          f"{extra['cores']} cores")
    publish("server_throughput", rows, {
        "code": "code", "endpoint": "endpoint", "clients": "clients",
        "offered_per_s": "offered per second", "requests": "requests",
        "errors": "errors", "per_s": "per second %.1f", "p50_ms": "p50 (ms) %.1f",
        "p95_ms": "p95 (ms) %.1f", "p99_ms": "p99 (ms) %.1f",
        "server_cpu_ms": "server CPU/req (ms) %.1f"}, extra=extra)
    if live:
        print()
        publish("server_live", live, {
            "code": "code", "watchers": "browsers watching", "connected": "streams open",
            "server_cpu_pct":
            "server CPU idle (pct) %.1f", "db_tx_per_s": "database transactions/s idle %.1f",
            "p50_ms": "leaderboard API p50 (ms) %.1f", "p95_ms": "p95 (ms) %.1f",
            "errors": "requests failed or timed out (10 s)"})


def main() -> None:
    """Seed the scratch database, measure each server in turn, publish; then clean up."""
    ap = _parser()
    args = ap.parse_args()
    global URL
    if args.database == "sqlite":
        if args.sse or args.stored > SEEDED:
            ap.error(f"on SQLite: no --sse (it reads PostgreSQL's statistics) and --stored at "
                     f"most {SEEDED} (more are copied in PostgreSQL's SQL)")
        URL = f"sqlite:///{Path(tempfile.gettempdir()) / f'{DB}-{os.getpid()}.db'}"

    started = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="paragrade-bench-"))
    artifacts = tmp / "artifacts"
    args.broker_url = (f"sqla+sqlite:///{tmp / 'broker.sqlite'}" if args.broker == "embedded"
                       else "redis://127.0.0.1:6379/14")
    counts = [int(w) for w in args.workers.split(",")]
    sources = [(f"now, {w} process{'es' * (w > 1)}" if len(counts) > 1 else "now", REPO, w)
               for w in counts]
    try:
        if args.before:
            sources.insert(0, (f"before ({args.before})", worktree(args.before, tmp / "before"),
                               1))
        recreate_db()
        t = time.perf_counter()
        world = seed(artifacts, students_n=args.students, stored=args.stored)
        seed_s = time.perf_counter() - t
        print(f"seeded {args.students} students, {args.stored} submissions in {seed_s:.1f} s",
              file=sys.stderr)
        rows: list[dict[str, Any]] = []
        live: list[dict[str, Any]] = []
        for label, source, workers in sources:
            got, got_live = measure(label, source, artifacts, world, args, workers)
            rows += got
            live += got_live
            print(json.dumps({"code": label, "rows": got, "live": got_live}), file=sys.stderr)
        _publish(args, rows, live, seed_s=seed_s, started=started)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if args.before:
            subprocess.run(["git", "worktree", "prune"], cwd=REPO, capture_output=True)
        if not args.keep:
            drop_db()


if __name__ == "__main__":
    main()
