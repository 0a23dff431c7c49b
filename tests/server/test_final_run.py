"""The final run through the server, as an instructor meets it: the deadline passes, the class's
counted submissions are timed again in rounds on a runner (one killed on the way), and the final
points replace the provisional ones on the board, in the CSV, in results.json."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from runners.protocol import Manifest, performance_share
from server.models import AssignmentVersion, FinalTurn
from server.services.grades import finals
from server.services.grades.leaderboard import FINAL, FINAL_NONE
from tests.server.conftest import REFERENCE, REPO_ROOT
from tests.server.live import Platform, wait_until

pytestmark = pytest.mark.slow
T1 = "t1-multiprocessing"
BASELINE = (REPO_ROOT / f"assignments/treasure-hunt/{T1}/baseline/solution.py").read_bytes()
RUNS = f"/api/courses/c/assignments/{T1}/final-runs"


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    # A short lease: the runner killed mid-turn gives its job back within seconds.
    p = Platform(tmp_path, f"sqla+sqlite:///{tmp_path / 'broker.sqlite'}", lease_s=6)
    yield p
    p.close()


def test_the_final_run_settles_the_class_points_after_the_last_deadline(
        platform: Platform) -> None:
    p = platform
    code = p.course(f"treasure-hunt/{T1}")
    ada, bob = p.student("ada", code), p.student("bob", code)
    quick = {"PARAGRADE_TIMING_BUDGET_S": "2"}  # the figures are not this test's business
    runner = p.start_runner("cpu-1", "cpu", env=quick)
    wait_until("t1 to validate", lambda: p.get(
        p.prof, f"/api/courses/c/assignments/{T1}")["validation"] == "ready", 180)
    subs = {"ada": p.submit(ada, T1, REFERENCE), "bob": p.submit(bob, T1, BASELINE)}
    for who, sid in subs.items():
        wait_until(f"{who}'s grade", lambda sid=sid: p.get(p.prof, f"/api/submissions/{sid}")[
            "status"] == "graded", 180)
    live = {who: p.get(p.prof, f"/api/submissions/{sid}")["score"] for who, sid in subs.items()}

    # Before the last deadline (bob's extension) the platform starts nothing by itself.
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    r = p.http.patch(f"/api/courses/c/assignments/{T1}", json={"deadline": past}, headers=p.prof)
    assert r.status_code == 200, r.text
    r = p.http.put(f"/api/courses/c/assignments/{T1}/extensions/bob@uni.edu", headers=p.prof,
                   json={"deadline": (datetime.now(UTC) + timedelta(hours=1)).isoformat()})
    assert r.status_code == 200, r.text
    with p.sessions() as s:
        assert finals.start_due(session=s) == 0
        s.commit()
    # A student can neither start nor watch one.
    assert p.http.post(RUNS, json={}, headers=ada).status_code == 403
    assert p.http.get(RUNS, headers=bob).status_code == 403

    # Once bob's own deadline has passed too, the platform starts it (3 rounds, its default).
    r = p.http.put(f"/api/courses/c/assignments/{T1}/extensions/bob@uni.edu", headers=p.prof,
                   json={"deadline": (datetime.now(UTC) - timedelta(seconds=1)).isoformat()})
    assert r.status_code == 200, r.text
    with p.sessions() as s:  # turns that find the node busy are timed again for 15 minutes
        assert finals.start_due(session=s, busy_wait_s=900) == 1
        s.commit()
    [run] = p.get(p.prof, RUNS)
    assert (run["status"], run["automatic"], run["rounds"], run["turns"]) == (
        "running", True, 3, 6)
    r = p.http.post(RUNS, json={"rounds": 2}, headers=p.prof)
    assert r.status_code == 409 and "under way" in r.json()["detail"], r.text
    # Before it settles, every figure is provisional.
    board = p.get(ada, f"/api/courses/c/assignments/{T1}/leaderboard")
    assert all(e["mark"] != FINAL for e in board), board

    # The runner dies in its first turn; another takes over and the run still completes.
    wait_until("a turn to start", lambda: _claimed(p), 120, 0.1)
    p.kill(runner)
    p.start_runner("cpu-2", "cpu", env=quick)
    done = wait_until("the final run to settle", lambda: (
        r := p.get(p.prof, f"{RUNS}/{run['id']}"))["status"] == "done" and r, 600)
    # Every student settled from three clean turns; a turn that found the node busy settled
    # nothing and was timed again in a later round.
    assert (done["done"], done["failed"]) == (6, 0), done
    assert done["turns"] == 6 + done["busy"], done
    assert all(t["node"] for t in done["turn_list"] if t["status"] in ("done", "busy")), done
    assert done["runner_seconds"] > 0
    grades = {g["email"].split("@")[0]: g for g in done["grades"]}
    assert set(grades) == {"ada", "bob"} and all(g["turns"] == 3 for g in grades.values())
    assert not any(g["node_busy"] for g in grades.values())
    scoring = _manifest(p).scoring
    for who, g in grades.items():
        assert g["live_score"] == live[who]
        if who == "bob":  # the serial baseline: no parallel work, no speedup earned
            assert g["speedup"] is None and g["score"] == scoring.test_points, g
            continue
        assert g["low"] <= g["speedup"] <= g["high"], g
        # The final points: the live tests' points and what the median earns on the curve.
        want = scoring.test_points + scoring.performance_points * performance_share(
            scoring, g["speedup"])
        assert g["score"] == pytest.approx(want, abs=0.01), (who, g)

    # The board, the CSV and results.json carry the final points now: ada's ranked, bob's
    # listed below, unranked.
    board = p.get(ada, f"/api/courses/c/assignments/{T1}/leaderboard")
    assert {e["alias"]: (e["score"], e["mark"]) for e in board} == {
        "ada": (grades["ada"]["score"], FINAL), "bob": (grades["bob"]["score"], FINAL_NONE)}
    assert [e["alias"] for e in board] == ["ada", "bob"]
    rows = {row["email"].split("@")[0]: row for row in csv.DictReader(io.StringIO(
        p.http.get(f"/api/courses/c/assignments/{T1}/grades.csv", headers=p.prof).text))}
    assert {w: float(rows[w]["final_score"]) for w in rows} == {
        w: g["score"] for w, g in grades.items()}
    results = p.get(p.prof, f"/api/submissions/{subs['ada']}/gradescope.json")
    assert results["score"] == grades["ada"]["score"]
    assert results["tests"][-1]["output"].startswith("final run: ")


def _claimed(p: Platform) -> bool:
    """A final turn is on a runner now."""
    with p.sessions() as s:
        return s.scalar(select(FinalTurn.id).where(FinalTurn.status == "running")) is not None


def _manifest(p: Platform) -> Manifest:
    with p.sessions() as s:
        return Manifest.model_validate(s.scalars(select(AssignmentVersion.manifest)).one())
