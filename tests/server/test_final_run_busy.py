"""A final run on a node that other work keeps busy, with this test playing the runner: a turn
whose timing found the node busy settles nothing and is timed again in a later round; a student
still short of clean turns at the run's busy limit keeps the live points, marked, on the board,
the run's page and in the audit log."""

from __future__ import annotations

import time
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import Engine, select

from runners.protocol import JobOutcome
from server.db import session_factory
from server.models import Assignment, AuditLog, FinalTurn
from server.services.grades import finals
from server.services.grades.leaderboard import FINAL, FINAL_BUSY
from tests.server.conftest import World, claim
from tests.server.reports import sample_report
from tests.server.test_final_runs_api import RUNS, _graded, _post
from tests.server.test_pages import browser

PAGE = "/c/th/t1-multiprocessing"


def _busy(median: float) -> JobOutcome:
    """A turn timed on a busy node: most windows short, its points left pending."""
    return JobOutcome.model_validate({"report": sample_report(
        median=median, lo=median - 0.1, hi=median + 0.1, interfered=True, credit="pending")})


def _clean(median: float) -> JobOutcome:
    return JobOutcome.model_validate({"report": sample_report(
        median=median, lo=median - 0.1, hi=median + 0.1, interfered=False)})


def _play(c: TestClient, owner: dict[int, str], outcome: Any) -> list[str]:
    """Answer every offered turn with `outcome(who, n)` (n: that student's turns so far)."""
    seen: list[str] = []
    while (offer := claim(c)) is not None:
        who = owner[offer["job"]["submission_id"]]
        _post(c, offer, outcome(who, seen.count(who)))
        seen.append(who)
    return seen


def test_busy_turns_are_timed_again_and_never_settle_a_figure(world: World,
                                                             engine: Engine) -> None:
    subs = _graded(world, engine)
    owner = {sid: who for who, sid in subs.items()}
    run = world.post(world.prof, RUNS, json={"rounds": 3}).json()
    # ada's first two turns find the node busy (and a busy node's figure is low: 0.6×).
    seen = _play(world.client, owner, lambda who, n: _busy(0.6) if who == "ada" and n < 2
                 else _clean(1.8 if who == "ada" else 1.2))
    assert seen.count("ada") == 5 and seen.count("bob") == 3, seen
    done = world.get(world.prof, f"{RUNS}/{run['id']}").json()
    assert (done["status"], done["done"], done["busy"], done["turns"]) == ("done", 6, 2, 8), done
    grades = {g["email"].split("@")[0]: g for g in done["grades"]}
    # Settled from three clean turns each: the busy 0.6× is in no figure.
    assert (grades["ada"]["speedup"], grades["ada"]["low"], grades["ada"]["turns"]) == (1.8, 1.8, 3)
    assert not grades["ada"]["node_busy"] and not grades["bob"]["node_busy"]
    busy = [t for t in done["turn_list"] if t["status"] == "busy"]
    assert len(busy) == 2 and all(t["node"].startswith("busy: 10 of 12 windows short") for t in busy)
    assert all(t["node"].startswith("free") for t in done["turn_list"] if t["status"] == "done")
    board = world.get(world.ada, "/api/courses/th/assignments/t1-multiprocessing/leaderboard")
    assert {e["alias"]: e["mark"] for e in board.json()} == {"ada": FINAL, "bob": FINAL}
    # The run's page (not raw JSON) shows every turn's node.
    page = browser(world, "prof@uni.edu", "prof-pass-4821").get(
        f"{PAGE}/manage/final-run/{run['id']}").text
    assert page.count('class="turn-busy"') == 2 and "busy: 10 of 12 windows short" in page
    assert "2 turns found the node busy" in page


def test_a_node_that_stays_busy_ends_at_the_limit_with_live_points_kept(
        world: World, engine: Engine) -> None:
    subs = _graded(world, engine)
    owner = {sid: who for who, sid in subs.items()}
    live = {who: world.get(world.prof, f"/api/submissions/{sid}").json()["score"]
            for who, sid in subs.items()}
    with session_factory(engine)() as s:
        a = s.scalars(select(Assignment)).one()
        run_id = finals.start(session=s, assignment=a, actor=None, role=None, rounds=1,
                              busy_wait_s=2).id
        s.commit()
    # bob's node is busy in every turn; ada's is free.
    answered: list[str] = []
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        offer = claim(world.client)
        if offer is None:
            time.sleep(0.2)
            continue
        who = owner[offer["job"]["submission_id"]]
        _post(world.client, offer, _busy(0.7) if who == "bob" else _clean(1.8))
        answered.append(who)
    assert answered.count("ada") == 1 and answered.count("bob") >= 2, answered
    run = world.get(world.prof, f"{RUNS}/{run_id}").json()
    # Past the limit: bob's last turn was still queued, or none was; the sweep settles the run.
    with session_factory(engine)() as s:
        finals.expire_due(session=s)
        s.commit()
    run = world.get(world.prof, f"{RUNS}/{run_id}").json()
    assert run["status"] == "done", run
    assert claim(world.client) is None  # a queued retry ended with the run
    grades = {g["email"].split("@")[0]: g for g in run["grades"]}
    assert grades["bob"]["node_busy"] and grades["bob"]["score"] == live["bob"], grades
    assert grades["bob"]["turns"] == 0
    assert not grades["ada"]["node_busy"] and grades["ada"]["speedup"] == 1.8
    board = world.get(world.ada, "/api/courses/th/assignments/t1-multiprocessing/leaderboard")
    assert {e["alias"]: e["mark"] for e in board.json()} == {"ada": FINAL, "bob": FINAL_BUSY}
    with session_factory(engine)() as s:  # the instructor is told who
        told = s.scalars(select(AuditLog).where(AuditLog.action == "final.node_busy")).one()
        assert told.detail["students"] == 1
        [bob] = told.detail["user_ids"]
        statuses = {t.status for t in s.scalars(select(FinalTurn).where(
            FinalTurn.run_id == run_id, FinalTurn.user_id == bob))}
        assert "busy" in statuses and statuses <= {"busy", "expired"}, statuses
    page = browser(world, "prof@uni.edu", "prof-pass-4821").get(
        f"{PAGE}/manage/final-run/{run_id}").text
    assert "final run: node busy (live points kept)" in page


def test_a_turn_the_baselines_wait_alone_made_busy_says_so() -> None:
    """Every window whole, yet the serial baseline waited for a CPU well above a quiet node's
    share: the turn is busy, and its node's words name the wait that made it so."""
    seen = {"cores": 2, "windows": 3, "short": 0, "retimed": 0, "delivered": None,
            "unreliable": False, "waiting": 0.01, "baseline_waiting": 0.068, "pressure": 40.0}
    words = finals.node_state(FinalTurn(status="busy", node=seen))
    assert words.startswith("busy: all 3 windows whole"), words
    assert "the serial baseline waited 7% of its calls for a CPU" in words, words
    quiet = finals.node_state(FinalTurn(status="done", node=seen | {"baseline_waiting": 0.004}))
    assert quiet.startswith("free: all 3 windows whole"), quiet
