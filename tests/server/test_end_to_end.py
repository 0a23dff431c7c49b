"""A user's whole path on the one-machine defaults: server, embedded broker, a runner process."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from paragrade.cli import app
from runners.protocol import SpeedupFigure, timed_on_a_busy_node
from tests.server.conftest import REFERENCE
from tests.server.live import Platform, wait_until

pytestmark = pytest.mark.slow
WRONG = b"def parallel_sum(n, chunks, workers=2):\n    return 0.001 * n * n / 2\n"
T1 = "t1-multiprocessing"


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    p = Platform(tmp_path, f"sqla+sqlite:///{tmp_path / 'broker.sqlite'}")
    yield p
    p.close()


def test_submit_reference_and_wrong_then_ranked(platform: Platform) -> None:
    p = platform
    code = p.course(f"treasure-hunt/{T1}", "treasure-hunt/t3-cuda")
    ada = p.student("ada", code)
    t3 = p.get(p.prof, "/api/courses/c/assignments/t3-cuda")
    assert t3["validation"] == "validating" and t3["kind"] == "gpu"

    runner_process = p.start_runner("cpu-1", "cpu,mpi")
    wait_until("t1 to validate on the runner", lambda: p.get(
        p.prof, f"/api/courses/c/assignments/{T1}")["validation"] == "ready")
    fleet = p.get(p.prof, "/api/fleet")
    [runner] = fleet["runners"]
    assert runner["name"] == "cpu-1" and runner["live"] and runner["queues"] == ["cpu", "mpi"]
    assert runner["capabilities"]["cores"] >= 1 and runner["capabilities"]["backend"] == "bwrap"
    assert fleet["queues"]["gpu"] == {"queued": 1, "running": 0, "in_broker": 1,
                                      "live_runners": 0,  # t3's validation waits for a GPU
                                      "scale": None}  # no fleet scaler runs here

    good = p.submit(ada, T1, REFERENCE)
    bad = p.submit(ada, T1, WRONG)
    # An instructor may try t3 before it validated; no live runner serves the gpu queue.
    gpu_id = p.submit(p.prof, "t3-cuda", b"x = 1\n")
    gpu = p.get(p.prof, f"/api/submissions/{gpu_id}")
    assert gpu["status"] == "queued" and gpu["waiting_for"] == "waiting for a GPU runner"
    assert gpu["queue"] == "gpu" and gpu["queue_position"] == 2  # behind t3's validation

    def graded(sid: int) -> dict | None:  # type: ignore[type-arg]
        s = p.get(ada, f"/api/submissions/{sid}")
        return s if s["status"] not in ("queued", "running") else None

    g, b = wait_until("the reference's grade", lambda: graded(good), 180), \
        wait_until("the wrong solution's grade", lambda: graded(bad), 60)
    assert (g["status"], g["verdict"], g["queue"]) == ("graded", "passed", "cpu"), g
    speedup = g["report"]["speedup"]
    # The figure is the benchmarks' business; here only a pathology fails (a 2-vCPU VM in a
    # noisy hour gave the 2-worker reference 0.95×, 1 of 4 windows short, once).
    assert speedup["median"] > 0.5 and speedup["ci_low"] <= speedup["median"], speedup
    assert (b["status"], b["verdict"]) == ("graded", "failed")
    assert all("wrong answer" in t["message"] for t in b["report"]["tests"]
               if t["hidden"] and t["outcome"] == "failed")
    board = p.get(ada, f"/api/courses/c/assignments/{T1}/leaderboard")
    # On a host other work keeps busy the figure's points wait (pending, unranked, marked so);
    # only the report's own interference says when that is allowed.
    busy = timed_on_a_busy_node(SpeedupFigure.model_validate(speedup))
    want = ("ada", None if busy else 1, good)
    assert [(e["alias"], e["rank"], e["submission_id"]) for e in board] == [want], board

    # A practice run from the CLI, as a student meets it: logged in, `paragrade try` runs the
    # public tests on the same runner, says it is not graded, and the board does not move.
    env = {"PARAGRADE_CLIENT_CONFIG": str(p.tmp / "client.json")}
    cli = CliRunner()
    logged = cli.invoke(app, ["login", p.base, "--email", "ada@uni.edu",
                              "--password", "studentpass1"], env=env)
    assert logged.exit_code == 0, logged.output
    solution = p.tmp / "solution.py"
    solution.write_bytes(REFERENCE)
    tried = cli.invoke(app, ["try", f"c/{T1}", str(solution), "--profile"], env=env)
    assert tried.exit_code == 0, tried.output
    assert "practice: not graded, no points" in tried.output, tried.output
    assert "Practice: not graded · " in tried.output and "public tests passed" in tried.output
    # Where the time of one call went: the pool's two workers, in the student's own lines.
    assert "Where the time went" in tried.output and "your solution.py" in tried.output
    assert tried.output.count("in call") == 2, tried.output
    assert p.get(ada, f"/api/courses/c/assignments/{T1}/leaderboard") == board
    assert len(p.get(ada, f"/api/courses/c/assignments/{T1}/practice")) == 1

    # Stopped as an operator stops it, or a pilot's allocation ends (SIGTERM to the runner's
    # process): its pool child ends, then the runner, in about a second (4-6 s until
    # 2026-12-07: Celery's loop over the embedded broker waited twice 2 s for a message before
    # it looked for a stop, and the exit joined billiard's idle threads one by one).
    pool = subprocess.run(["pgrep", "-P", str(runner_process.pid)], capture_output=True,
                          text=True).stdout.split()
    assert pool, "the runner's pool child"
    stopping = time.monotonic()
    runner_process.send_signal(signal.SIGTERM)
    assert runner_process.wait(30) == 0
    took = time.monotonic() - stopping
    assert took < 3, f"the runner took {took:.1f} s to stop"
    wait_until("its pool child to go", lambda: not any(map(_alive, pool)), 5)


def _alive(pid: str) -> bool:
    """Whether the process lives (a zombie does not: it waits only to be reaped)."""
    try:
        return "Z (zombie)" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
