"""Runners that follow the queue, on a real SLURM cluster: `paragrade admin scale` submits pilots
(`paragrade runner` as batch jobs) while work waits and none when it does not; an idle pilot
leaves; a pilot told its allocation ends (SLURM's drain signal) finishes its grading and takes no
other; a pilot cancelled mid-grading hands its job back, which another pilot grades, once; a
pilot's credential ends with its job. The server's side of it: tests/server/test_autoscaling.py."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from runners.fleet.leaving import DRAIN_DEADLINE, MARGIN_S, Tenure
from server.models import GradeReportRow, Job, RunnerCredential
from tests.pilots import PACKAGES, Scaled, available
from tests.server.live import wait_until
from tests.slurm_cluster import SlurmCluster, missing

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
GOOD = (PACKAGES / "quick" / "reference" / "solution.py").read_bytes()
SLOW = b"import time\n\n\ndef total(n, workers=1):\n    time.sleep(4)\n    return n * (n - 1) // 2\n"


def test_a_drain_hands_back_only_the_job_that_cannot_finish_in_time() -> None:
    t = Tenure(drain_s=600)
    t._shared[DRAIN_DEADLINE] = time.time() + 600  # what SIGUSR1 sets: the allocation ends in 600 s
    assert t.overdue(time.time(), 300) is None
    assert t.overdue(time.time(), 600 - MARGIN_S + 5) is not None
    assert Tenure().overdue(time.time(), 10 ** 6) is None  # no drain, nothing is overdue


@pytest.fixture(scope="module")
def shared() -> Iterator[Path]:
    """A folder the cluster, the scaler and the pilots share (pytest's tmp dirs are 0700)."""
    root = Path(tempfile.mkdtemp(prefix="paragrade-pilots-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(shared: Path) -> Iterator[SlurmCluster]:
    """The suite's two-node SLURM cluster (a slurmd per node, a core each): pilots land on
    either node."""
    if why := missing():
        pytest.skip(why)
    if not available():
        pytest.skip("no Redis on 127.0.0.1:6379")
    c = SlurmCluster(shared / "cluster", nodes=2).start()
    yield c
    c.stop()


@pytest.fixture
def scaled(tmp_path: Path, shared: Path, cluster: SlurmCluster) -> Iterator[Scaled]:
    s = Scaled(tmp_path, shared, cluster)
    yield s
    s.close()


def _graded(s: Scaled, who: dict[str, str], sid: int) -> dict | None:  # type: ignore[type-arg]
    sub = s.p.get(who, f"/api/submissions/{sid}")
    return sub if sub["status"] not in ("queued", "running") else None


def _reports(s: Scaled, sid: int) -> int:
    with s.p.sessions() as db:
        return int(db.scalar(select(func.count()).select_from(GradeReportRow)
                             .where(GradeReportRow.submission_id == sid)) or 0)


def test_pilots_start_for_the_queue_and_leave_when_it_is_empty(scaled: Scaled) -> None:
    s = scaled
    assert not s.pilots()
    ada = s.p.student("ada", s.p.course("quick"))  # its validation job: the first pilot
    wait_until("the package to validate on a pilot", lambda: s.p.get(
        s.p.prof, "/api/courses/c/assignments/quick")["validation"] == "ready", 90)
    sids = [s.p.submit(ada, "quick", GOOD) for _ in range(5)]
    most = 0

    def all_graded() -> bool:
        nonlocal most
        most = max(most, len(s.pilots()))
        return all(_graded(s, ada, sid) for sid in sids)

    wait_until("five submissions graded by pilots", all_graded, 120)
    assert 1 <= most <= 2, most  # never more than the maximum
    for sid in sids:
        assert _graded(s, ada, sid)["verdict"] == "passed"  # type: ignore[index]
        assert _reports(s, sid) == 1  # graded exactly once
    with s.p.sessions() as db:
        runners = set(db.scalars(select(Job.runner).where(Job.kind == "grade")))
    assert all(r and r.startswith(f"{s.name}-pilot-cpu-") for r in runners), runners
    # Idle for idle_exit_s, every pilot leaves; the fleet is back at its minimum, 0.
    wait_until("the pilots to leave once idle", lambda: not s.pilots(), 60)
    wait_until("the scaler to see it", lambda: (lambda q: q["scale"] and q["scale"]["desired"]
                                                == 0 and q["scale"]["running"] == 0)(s.fleet()), 30)
    with s.p.sessions() as db:
        creds = list(db.scalars(select(RunnerCredential)))
    assert creds and all(c.revoked_at is not None and c.expires_at is not None for c in creds)
    assert not list(s.state.glob("*/secrets.env"))  # every pilot read its secrets and deleted them
    log = s.runner_log(creds[0].name)
    assert "idle for" in log and "leaving" in log, log[-2000:]
    # The next submission waits for one pilot's start, and the student is told so.
    wait_until("the pilots to be silent", lambda: s.fleet()["live_runners"] == 0, 30)
    sid = s.p.submit(ada, "quick", GOOD)
    said = wait_until("the student to be told a runner starts", lambda: (
        lambda w: w if w and w.startswith("starting a runner") else None)(
        s.p.get(ada, f"/api/submissions/{sid}")["waiting_for"]), 10)
    assert re.fullmatch(r"starting a runner, about \d+ s", said), said  # measured starts
    assert wait_until("it to be graded", lambda: _graded(s, ada, sid), 90)["verdict"] == "passed"


def test_a_drained_pilot_finishes_its_grading_and_a_cancelled_one_hands_it_back(
        scaled: Scaled) -> None:
    s = scaled
    ada = s.p.student("ada", s.p.course("quick"))
    wait_until("the package to validate", lambda: s.p.get(
        s.p.prof, "/api/courses/c/assignments/quick")["validation"] == "ready", 90)

    def grading_pilot(sid: int) -> tuple[str, str]:
        wait_until("a pilot to grade it", lambda: s.p.get(
            ada, f"/api/submissions/{sid}")["status"] == "running", 60)
        with s.p.sessions() as db:
            name = db.scalar(select(Job.runner).where(Job.submission_id == sid))
        assert name is not None
        return name, s.pilots()[name][0]

    # SLURM's drain signal (what --signal=B:USR1@drain_s sends): the grading fits, it finishes.
    first = s.p.submit(ada, "quick", SLOW)
    pilot, jid = grading_pilot(first)
    subprocess.run(["scancel", "--batch", "--signal=USR1", jid], env=s.cluster.env, check=True)
    done = wait_until("the drained pilot's grading", lambda: _graded(s, ada, first), 60)
    assert done["verdict"] == "passed" and _reports(s, first) == 1
    wait_until("the drained pilot to leave", lambda: pilot not in s.pilots(), 30)
    log = s.runner_log(pilot)
    assert "draining" in log and "handed back" not in log, log[-3000:]
    # Cancelled mid-grading (a node taken back): the job goes back at once, another pilot grades it.
    second = s.p.submit(ada, "quick", SLOW)
    pilot, jid = grading_pilot(second)
    subprocess.run(["scancel", jid], env=s.cluster.env, check=True)
    try:
        wait_until("the job handed back", lambda: "handed back" in s.runner_log(pilot), 30)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the pilot's log:\n{s.runner_log(pilot)[-3000:]}") from None
    done = wait_until("another pilot's grading", lambda: _graded(s, ada, second), 90)
    assert done["verdict"] == "passed" and _reports(s, second) == 1
    with s.p.sessions() as db:
        job = db.scalar(select(Job).where(Job.submission_id == second))
        assert job is not None and job.runner != pilot
        assert job.attempts == 1  # the handed-back attempt is not counted against anyone
