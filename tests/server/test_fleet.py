"""The queue under faults, with real processes: Celery over Redis, runner processes, the reaper.

The machine's Redis (127.0.0.1:6379) serves with a key prefix per test; the restart test starts
a Redis of its own (no persistence, like the machine's), so that restarting it loses the queue.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy import func, select

from server.models import GradeReportRow, Job, Submission
from server.settings import REPO_ROOT
from tests.server.live import Platform, free_port, redis_server, wait_until

pytestmark = pytest.mark.slow
PACKAGES = REPO_ROOT / "tests" / "fixtures" / "queue"
GOOD = (PACKAGES / "quick" / "reference" / "solution.py").read_bytes()
SLOW = b"import time\n\n\ndef total(n, workers=1):\n    time.sleep(3)\n    return n * (n - 1) // 2\n"
BURST = 40  # bench/queue_throughput.py drains 500


def _reachable(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    url = "redis://127.0.0.1:6379/0"
    if not _reachable(url):
        pytest.skip("no Redis on 127.0.0.1:6379")
    prefix = f"paragrade-test-{uuid.uuid4().hex[:8]}:"
    p = Platform(tmp_path, url, key_prefix=prefix, assignments_dir=PACKAGES, lease_s=4)
    yield p
    p.close()
    r = redis.Redis.from_url(url)
    for key in r.scan_iter(f"{prefix}*"):
        r.delete(key)


def _ready(p: Platform) -> None:
    wait_until("the package to validate", lambda: p.get(
        p.prof, "/api/courses/c/assignments/quick")["validation"] == "ready", 60)


def _settled(p: Platform, who: dict[str, str], sid: int) -> dict | None:  # type: ignore[type-arg]
    s = p.get(who, f"/api/submissions/{sid}")
    return s if s["status"] not in ("queued", "running") else None


def test_a_runner_killed_mid_job_is_graded_exactly_once(platform: Platform) -> None:
    p = platform
    ada = p.student("ada", p.course("quick"))
    first = p.start_runner("first")
    _ready(p)
    sid = p.submit(ada, "quick", SLOW)
    wait_until("the first runner to start grading", lambda: p.get(
        ada, f"/api/submissions/{sid}")["status"] == "running", 30)
    busy = {r["name"]: r["current_job_id"] for r in p.get(p.prof, "/api/fleet")["runners"]}
    assert busy["first"] is not None
    p.kill(first)  # SIGKILL: the worker, its pool child and the sandbox, mid-job

    p.start_runner("second")
    done = wait_until("the job to be graded again", lambda: _settled(p, ada, sid), 120)
    assert (done["status"], done["verdict"]) == ("graded", "passed"), done
    with p.sessions() as s:
        jobs = s.scalars(select(Job).where(Job.submission_id == sid)).all()
        reports = s.scalar(select(func.count()).select_from(GradeReportRow)
                           .where(GradeReportRow.submission_id == sid))
        sub = s.get(Submission, sid)
        assert sub is not None
        assert [(j.state, j.attempts, j.runner) for j in jobs] == [("done", 2, "second")]
        assert reports == 1
        assert sub.counts_for_quota  # graded: it counts once, like any graded submission


def test_cancelling_a_running_job_stops_it_and_the_runner_goes_on(platform: Platform) -> None:
    p = platform
    ada = p.student("ada", p.course("quick"))
    p.start_runner("r")
    _ready(p)
    sid = p.submit(ada, "quick", SLOW.replace(b"sleep(3)", b"sleep(120)"))
    wait_until("the grading to start", lambda: p.get(
        ada, f"/api/submissions/{sid}")["status"] == "running", 30)
    r = p.http.post(f"/api/submissions/{sid}/cancel", headers=ada)
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    wait_until("the runner to stop the job", lambda: "cancelled while it ran" in p.runner_log("r"),
               30)
    # Killed processes take a moment to exit; one the runner left behind would sleep on for two
    # minutes.
    wait_until("its sandbox to be gone", lambda: subprocess.run(
        ["pgrep", "-f", "/sub/solution.py"], capture_output=True, text=True).stdout == "", 10)
    nxt = p.submit(ada, "quick", GOOD)
    done = wait_until("the next job", lambda: _settled(p, ada, nxt), 60)
    assert done["verdict"] == "passed"
    assert p.get(ada, f"/api/submissions/{sid}")["status"] == "cancelled"
    with p.sessions() as s:
        assert s.scalar(select(func.count()).select_from(GradeReportRow)
                        .where(GradeReportRow.submission_id == sid)) == 0


def test_a_redis_restart_loses_no_job_and_fair_share_orders_them(tmp_path: Path) -> None:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("no redis-server binary")
    port = free_port()

    def start() -> subprocess.Popen[bytes]:
        return redis_server(binary, port, tmp_path)

    server = start()
    p = Platform(tmp_path, f"redis://127.0.0.1:{port}/0", assignments_dir=PACKAGES, lease_s=4)
    try:
        code = p.course("quick")
        p.http.patch("/api/courses/c/assignments/quick", json={"quota_count": 50},
                     headers=p.prof).raise_for_status()
        ada, bob = p.student("ada", code), p.student("bob", code)
        runner = p.start_runner("one")
        _ready(p)
        p.kill(runner)

        # Ada floods the queue before Bob submits once; then one is cancelled.
        ada_ids = [p.submit(ada, "quick", GOOD) for _ in range(4)]
        bob_id = p.submit(bob, "quick", GOOD)
        cancelled = p.submit(ada, "quick", GOOD)
        assert p.http.post(f"/api/submissions/{cancelled}/cancel",
                           headers=ada).json()["status"] == "cancelled"
        assert p.get(p.prof, "/api/fleet")["queues"]["cpu"]["in_broker"] == 6

        server.terminate()
        server.wait(10)
        server = start()  # an empty Redis: every message is gone
        cpu = p.get(p.prof, "/api/fleet")["queues"]["cpu"]
        assert (cpu["queued"], cpu["running"], cpu["in_broker"]) == (5, 0, 0)

        p.start_runner("two")
        for sid in [*ada_ids, bob_id]:
            done = wait_until(f"submission {sid}", lambda sid=sid: _settled(
                p, bob if sid == bob_id else ada, sid), 120)
            assert (done["status"], done["verdict"]) == ("graded", "passed"), done
        with p.sessions() as s:
            order = [j.submission_id for j in s.scalars(
                select(Job).where(Job.state == "done", Job.kind == "grade")
                .order_by(Job.claimed_at))]
            never = s.scalar(select(func.count()).select_from(GradeReportRow)
                             .where(GradeReportRow.submission_id == cancelled))
        assert sorted(order) == sorted([*ada_ids, bob_id])  # each graded once
        # Bob's first submission waits behind at most Ada's first, not behind all four.
        assert order.index(bob_id) <= 1, order
        assert never == 0 and p.get(ada, f"/api/submissions/{cancelled}")["status"] == "cancelled"
    finally:
        p.close()
        server.terminate()
        server.wait(10)


def test_a_burst_drains_through_two_runners_without_duplicates(platform: Platform) -> None:
    p = platform
    code = p.course("quick")
    p.http.patch("/api/courses/c/assignments/quick", json={"quota_count": 1000},
                 headers=p.prof).raise_for_status()
    students = [p.student(f"s{i}", code) for i in range(5)]
    p.start_runner("a")
    _ready(p)
    ids = [p.submit(students[i % 5], "quick", GOOD) for i in range(BURST)]
    cpu = p.get(p.prof, "/api/fleet")["queues"]["cpu"]  # the broker (key prefix and all) agrees
    assert cpu["in_broker"] >= cpu["queued"] - 1 > BURST // 2, cpu  # one may be in a runner's hands
    p.start_runner("b")
    start = time.monotonic()

    def remaining() -> int:
        with p.sessions() as s:
            return int(s.scalar(select(func.count()).select_from(Submission).where(
                Submission.status.in_(("queued", "running")))) or 0)

    wait_until(f"{BURST} gradings", lambda: remaining() == 0, 600, 1)
    elapsed = time.monotonic() - start
    with p.sessions() as s:
        rows = s.execute(select(Job.submission_id, Job.attempts, Job.runner, Job.state)
                         .where(Job.kind == "grade")).all()
        reports = s.execute(select(GradeReportRow.submission_id, func.count())
                            .group_by(GradeReportRow.submission_id)).all()
        verdicts = set(s.scalars(select(Submission.verdict)))
    assert sorted(r.submission_id for r in rows) == sorted(ids)  # one job each
    assert {(r.attempts, r.state) for r in rows} == {(1, "done")}
    assert sorted(sid for sid, _ in reports) == sorted(ids) and {n for _, n in reports} == {1}
    assert verdicts == {"passed"}
    share = {name: sum(1 for r in rows if r.runner == name) for name in ("a", "b")}
    assert min(share.values()) >= BURST // 5, share  # both runners took a real share
    assert elapsed < BURST * 3, f"{BURST} gradings took {elapsed:.0f} s"  # pathology bound only


def test_a_runner_serves_with_its_own_credential_and_a_revoked_one_stops(
        platform: Platform) -> None:
    """Real runner processes on per-runner credentials: another name is refused at the start with
    the server's reason; revoking the credential mid-job stops the grading and the runner, and
    another runner grades the job once."""
    from server.services.fleet import runner_credentials

    p = platform
    with p.sessions() as s, s.begin():
        first = runner_credentials.add(session=s, name="node-a", queues=["cpu", "mpi"])
        second = runner_credentials.add(session=s, name="node-b", queues=["cpu"])
    ada = p.student("ada", p.course("quick"))
    impostor = p.start_runner("node-z", env={"PARAGRADE_RUNNER_TOKEN": first})
    assert impostor.wait(60) == 2
    assert "this is runner node-a's credential: it cannot act as 'node-z'" in " ".join(
        p.runner_log("node-z").split())

    a = p.start_runner("node-a", env={"PARAGRADE_RUNNER_TOKEN": first})
    _ready(p)
    sid = p.submit(ada, "quick", SLOW)
    wait_until("node-a to start grading", lambda: p.get(
        ada, f"/api/submissions/{sid}")["status"] == "running", 30)
    with p.sessions() as s, s.begin():
        assert runner_credentials.revoke(session=s, name="node-a", max_attempts=3) == 1
    assert a.wait(60) is not None  # the runner stops itself (warm shutdown, job abandoned)
    log = " ".join(p.runner_log("node-a").split())
    assert "node-a's credential was revoked" in log and "cancelled while it ran" in log, log
    left = subprocess.run(["pgrep", "-f", "/sub/solution.py"], capture_output=True, text=True)
    assert left.stdout == "", "a sandbox outlived its revoked runner"

    p.start_runner("node-b", queues="cpu", env={"PARAGRADE_RUNNER_TOKEN": second})
    done = wait_until("node-b to grade the job", lambda: _settled(p, ada, sid), 120)
    assert (done["status"], done["verdict"]) == ("graded", "passed"), done
    with p.sessions() as s:
        jobs = s.scalars(select(Job).where(Job.submission_id == sid)).all()
        assert [(j.state, j.attempts, j.runner) for j in jobs] == [("done", 2, "node-b")]
        assert s.scalar(select(func.count()).select_from(GradeReportRow)
                        .where(GradeReportRow.submission_id == sid)) == 1
