"""Final runs as the API serves them, with this test playing the runner: who may start one,
what a runner is told, how rounds settle into final points (a wrong timed answer earns nothing,
a turn the platform failed is left out), cancelling, and a later run replacing an earlier one."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select

from runners.protocol import JobOutcome, Manifest, performance_share
from server.db import session_factory
from server.models import AssignmentVersion, Job
from server.services.grades import finals
from tests.server.conftest import REFERENCE, RUNNER, World, claim
from tests.server.reports import sample_report
from tests.server.test_pages import browser, csrf

RUNS = "/api/courses/th/assignments/t1-multiprocessing/final-runs"
PAGE = "/c/th/t1-multiprocessing"


def _post(c: TestClient, offer: dict[str, Any], outcome: JobOutcome) -> None:
    r = c.post(f"/api/runner/jobs/{offer['job_id']}/result", content=outcome.model_dump_json(),
               headers={**RUNNER, "X-Job-Token": offer["token"],
                        "Content-Type": "application/json"})
    assert r.status_code == 204, r.text


def _graded(world: World, engine: Engine) -> dict[str, int]:
    """ada and bob each with a passed submission (1.8× and 1.2× live)."""
    subs = {who: world.submit(getattr(world, who), REFERENCE).json()["id"]
            for who in ("ada", "bob")}
    for median in (1.8, 1.2):
        offer = claim(world.client)
        assert offer is not None and offer["job"] is not None
        _post(world.client, offer, JobOutcome.model_validate({"report": sample_report(
            median=median, lo=median - 0.1, hi=median + 0.1)}))
    return subs


def _scoring(engine: Engine) -> Any:
    with session_factory(engine)() as s:
        return Manifest.model_validate(s.scalars(select(AssignmentVersion.manifest)).one()).scoring


def test_rounds_settle_into_final_points(world: World, engine: Engine) -> None:
    c = world.client
    r = world.post(world.prof, RUNS, json={})
    assert r.status_code == 422 and "nothing to time" in r.json()["detail"], r.text
    subs = _graded(world, engine)
    page = browser(world).get(f"/s/{subs['ada']}").text
    assert "These points are provisional" in page and "Final run:" not in page
    assert world.post(world.ada, RUNS, json={}).status_code == 403
    assert world.get(world.ada, RUNS).status_code == 403
    assert world.post(world.prof, RUNS, json={"rounds": 0}).status_code == 422
    r = world.post(world.prof, RUNS, json={"rounds": 3})
    assert r.status_code == 202, r.text
    run = r.json()
    assert (run["status"], run["turns"], run["automatic"]) == ("running", 6, False)

    # The runner is told to time only, on a third of the budget each round.
    owner = {sid: who for who, sid in subs.items()}
    figures = {"ada": [1.5, 2.1, 1.9], "bob": [1.3, "wrong", "lost"]}
    rounds: dict[str, int] = {"ada": 0, "bob": 0}
    seen: list[str] = []
    while (offer := claim(c)) is not None:
        job = offer["job"]
        assert job["timing_only"] and abs(job["timing_share"] - 1 / 3) < 1e-9, job
        who = owner[job["submission_id"]]
        seen.append(who)
        what = figures[who][rounds[who]]
        if what == "lost":  # the platform fails it on every attempt: left out of the median
            _post(c, offer, JobOutcome(platform_error="the node went away"))
            with session_factory(engine)() as s:
                if s.get(Job, offer["job_id"]).state == "queued":  # type: ignore[union-attr]
                    continue
        elif what == "wrong":  # its own code answered a timed call wrongly: nothing earned
            _post(c, offer, JobOutcome.model_validate({"report": sample_report(passed=False)}))
        else:
            _post(c, offer, JobOutcome.model_validate({"report": sample_report(
                median=float(what), lo=float(what) - 0.2, hi=float(what) + 0.2)}))
        rounds[who] += 1
    # Rounds follow one another: each takes both students before the next begins.
    assert sorted(seen[:2]) == ["ada", "bob"]
    done = world.get(world.prof, f"{RUNS}/{run['id']}").json()
    assert (done["status"], done["done"], done["failed"]) == ("done", 5, 1), done
    grades = {g["email"].split("@")[0]: g for g in done["grades"]}
    assert (grades["ada"]["speedup"], grades["ada"]["low"], grades["ada"]["high"],
            grades["ada"]["turns"]) == (1.9, 1.5, 2.1, 3)
    assert (grades["bob"]["speedup"], grades["bob"]["turns"]) == (0.65, 2)  # median of 0, 1.3
    scoring = _scoring(engine)
    for g in grades.values():
        assert g["score"] == round(scoring.test_points + scoring.performance_points
                                   * performance_share(scoring, g["speedup"]), 2)
        assert g["live_score"] != g["score"]

    # Each student is told the run's result once (the grade's change and the run: one notice).
    for who in ("ada", "bob"):
        told = [n for n in world.get(getattr(world, who), "/api/notifications").json()[
            "notifications"] if n["kind"] in ("final_run", "grade_changed")]
        assert [(n["kind"], n["title"].rsplit(": ", 1)[1]) for n in told] == [
            ("final_run", f"the final run settled your grade at {grades[who]['score']:g} points")]
    board = world.get(world.ada, "/api/courses/th/assignments/t1-multiprocessing/leaderboard")
    assert [(e["alias"], e["score"], e["mark"]) for e in board.json()] == [
        ("ada", grades["ada"]["score"], "final run"), ("bob", grades["bob"]["score"], "final run")]
    got = world.get(world.ada, f"/api/submissions/{subs['ada']}").json()
    assert (got["final_score"], got["final_speedup"]) == (grades["ada"]["score"], 1.9)
    page = browser(world).get(f"/s/{subs['ada']}").text
    assert "Final run:" in page and "1.90×, the median of 3 rounds (1.50–2.10)" in page

    # A second run from the manage page, cancelled there: its jobs end and the first run's
    # points stand.
    prof = browser(world, "prof@uni.edu", "prof-pass-4821")
    manage = prof.get(f"{PAGE}/manage").text
    assert "Final run" in manage and "Run it again" in manage
    r = prof.post(f"{PAGE}/manage/final-run", data={"csrf_token": csrf(manage), "rounds": "1"})
    assert r.status_code == 303, r.text
    again = world.get(world.prof, RUNS).json()[0]
    assert (again["status"], again["rounds"], again["automatic"]) == ("running", 1, False)
    assert world.post(world.prof, RUNS, json={}).status_code == 409
    assert "under way" in prof.post(f"{PAGE}/manage/final-run",
                                    data={"csrf_token": csrf(manage), "rounds": "1"}).text
    r = prof.post(f"{PAGE}/manage/final-run/{again['id']}/cancel",
                  data={"csrf_token": csrf(manage)})
    assert r.status_code == 303, r.text
    assert world.get(world.prof, f"{RUNS}/{again['id']}").json()["status"] == "cancelled"
    assert claim(c) is None
    assert world.post(world.prof, f"{RUNS}/{again['id']}/cancel").status_code == 409
    board = world.get(world.ada, "/api/courses/th/assignments/t1-multiprocessing/leaderboard")
    assert [e["score"] for e in board.json()] == [grades["ada"]["score"], grades["bob"]["score"]]

    # A third, finished: its figures replace the first's everywhere.
    third = world.post(world.prof, RUNS, json={"rounds": 1}).json()
    while (offer := claim(c)) is not None:
        _post(c, offer, JobOutcome.model_validate({"report": sample_report(median=1.1)}))
    assert world.get(world.prof, f"{RUNS}/{third['id']}").json()["status"] == "done"
    board = world.get(world.ada, "/api/courses/th/assignments/t1-multiprocessing/leaderboard")
    assert {e["speedup"] for e in board.json()} == {1.1}
    runs = world.get(world.prof, RUNS).json()
    assert [r["status"] for r in runs] == ["done", "cancelled", "done"]


def test_two_starts_at_once_make_one_run(world: World, engine: Engine) -> None:
    _graded(world, engine)
    gate = threading.Barrier(4)

    def start(_: int) -> int:
        gate.wait()
        return int(world.post(world.prof, RUNS, json={"rounds": 1}).status_code)

    with ThreadPoolExecutor(4) as pool:
        codes = sorted(pool.map(start, range(4)))
    assert codes == [202, 409, 409, 409], codes
    assert [r["status"] for r in world.get(world.prof, RUNS).json()] == ["running"]
    with session_factory(engine)() as s:  # one job per student, not one per start
        assert len(s.scalars(select(Job).where(Job.kind == "final")).all()) == 2


def test_a_turn_that_measured_nothing_is_left_out_not_zero(world: World, engine: Engine) -> None:
    """A passed turn without a speedup (a simulated GPU, timing off there) is the platform's
    failure: the student keeps the live points rather than earning nothing."""
    subs = _graded(world, engine)
    run = world.post(world.prof, RUNS, json={"rounds": 1}).json()
    while (offer := claim(world.client)) is not None:
        report = sample_report(median=1.5)
        if offer["job"]["submission_id"] == subs["ada"]:
            report = {**report, "speedup": None, "summary": "speedup not measured"}
        _post(world.client, offer, JobOutcome.model_validate({"report": report}))
    done = world.get(world.prof, f"{RUNS}/{run['id']}").json()
    assert (done["status"], done["done"], done["failed"]) == ("done", 1, 1), done
    assert [g["email"] for g in done["grades"]] == ["bob@uni.edu"]
    board = world.get(world.ada, "/api/courses/th/assignments/t1-multiprocessing/leaderboard")
    marks = {e["alias"]: e["mark"] for e in board.json()}
    assert marks == {"ada": None, "bob": "final run"}, marks


def test_the_platform_starts_a_final_run_only_for_a_recent_last_deadline(
        world: World, engine: Engine) -> None:
    """An assignment that closed more than a week ago is not re-timed (an upgrade finds many);
    one whose last deadline is an extension of a moment ago is."""
    _graded(world, engine)
    url = "/api/courses/th/assignments/t1-multiprocessing"
    old = (datetime.now(UTC) - timedelta(days=8)).isoformat()
    assert world.client.patch(url, json={"deadline": old}, headers=world.prof).status_code == 200
    with session_factory(engine)() as s:
        assert finals.start_due(session=s) == 0
        s.commit()
    r = world.client.put(f"{url}/extensions/bob@uni.edu", headers=world.prof, json={
        "deadline": (datetime.now(UTC) - timedelta(seconds=1)).isoformat()})
    assert r.status_code == 200, r.text
    with session_factory(engine)() as s:
        assert finals.start_due(session=s) == 1
        assert finals.start_due(session=s) == 0  # one run, not one per sweep
        s.commit()
    [run] = world.get(world.prof, RUNS).json()
    assert (run["automatic"], run["rounds"], run["turns"]) == (True, 3, 6)


def test_the_final_run_is_not_due_at_the_deadlines_very_instant(
        world: World, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deadline's one boundary (extensions.passed): at the instant a submission is still on
    time, so the final run waits for the microsecond after."""
    _graded(world, engine)
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    url = "/api/courses/th/assignments/t1-multiprocessing"
    assert world.client.patch(url, json={"deadline": at.isoformat()},
                              headers=world.prof).status_code == 200
    for instant, started in ((at, 0), (at + timedelta(microseconds=1), 1)):
        monkeypatch.setattr(finals, "now", lambda t=instant: t)
        with session_factory(engine)() as s:
            assert finals.start_due(session=s) == started, instant
            s.commit()


def test_every_page_shows_the_settled_points_split_into_their_parts(
        world: World, engine: Engine) -> None:
    """After a final run, a student's submission page, "your submissions", their course page,
    the assignment's board and the course board show the same settled points, each split into
    tests, performance and hand-graded points, the live points beside them, labelled."""
    subs = _graded(world, engine)  # ada 1.8×, bob 1.2× live
    rubric = "/api/courses/th/assignments/t1-multiprocessing"
    assert world.client.put(f"{rubric}/rubric", json={"points": 10},
                            headers=world.prof).status_code == 200
    item = world.post(world.prof, f"{rubric}/rubric/items",
                      json={"title": "uses a pool", "points": 6}).json()["id"]
    held = world.post(world.prof, f"{rubric}/grading/next").json()
    graded_by_hand = held["student"].split("@")[0]
    g = f"{rubric}/grading/{held['id']}"
    assert world.client.put(f"{g}/items/{item}", headers=world.prof).status_code == 200
    assert world.post(world.prof, f"{g}/done", json={}).status_code == 200
    assert world.post(world.prof, f"{rubric}/grading/release", json={}).status_code == 200
    live = {who: world.get(world.prof, f"/api/submissions/{sid}").json()["score"]
            for who, sid in subs.items()}
    run = world.post(world.prof, RUNS, json={"rounds": 1}).json()
    owner = {sid: who for who, sid in subs.items()}
    while (offer := claim(world.client)) is not None:
        median = 1.9 if owner[offer["job"]["submission_id"]] == "ada" else 1.1
        _post(world.client, offer, JobOutcome.model_validate({"report": sample_report(
            median=median, lo=median - 0.1, hi=median + 0.1)}))
    done = world.get(world.prof, f"{RUNS}/{run['id']}").json()
    assert done["status"] == "done", done
    final = {g["email"].split("@")[0]: g["score"] for g in done["grades"]}
    assert final["ada"] != live["ada"] and final["bob"] != live["bob"], (final, live)
    api_board = {e["alias"]: e for e in world.get(
        world.ada, "/api/courses/th/assignments/t1-multiprocessing/leaderboard").json()}
    course_api = {e["alias"]: e for e in world.get(
        world.ada, "/api/courses/th/leaderboard").json()["entries"]}

    for who in ("ada", "bob"):
        total, by_hand = final[who], 6.0 if who == graded_by_hand else 0.0
        tests, performance = 60.0, round(final[who] - 60, 2)
        split = f"tests {tests:g} · performance {performance:g}"
        assert (api_board[who]["score"], api_board[who]["tests"],
                api_board[who]["performance"]) == (total, tests, performance), api_board[who]
        assert (course_api[who]["total"], course_api[who]["manual"]) == (
            round(total + by_hand, 2), by_hand), course_api[who]
        b = browser(world, f"{who}@uni.edu")
        page = b.get(f"/s/{subs[who]}").text
        assert f"passed · {total:g} / 100 points (final run)" in page, page
        hand = f" · hand-graded {by_hand:g}" if by_hand else ""
        assert f"{split}{hand} · this grading's own points: {live[who]:g}" in page, page
        mine = b.get(PAGE).text  # "your submissions"
        assert f"{total:g} <span class=\"muted\">(final run; live {live[who]:g})" in mine, mine
        home = b.get("/").text  # the student's course page
        assert f"your points: <strong>{total:g}</strong>" in home, home
        assert f"{split}{hand} · final run; live {live[who]:g}" in home, home
        row = _row(b.get(f"{PAGE}/leaderboard").text)
        assert f"{total:g} <small class=\"muted parts\">{split}</small>" in row, row
        row = _row(b.get("/c/th/-/board").text)
        assert f"{total + by_hand:g} <small class=\"muted parts\">{split}{hand}</small>" in row, row


def _row(page: str) -> str:
    """The reader's own row of a board page."""
    start = page.index('<tr class="you">')
    return page[start:page.index("</tr>", start)]


def test_a_settled_row_splits_the_points_of_the_submission_the_run_settled(
        world: World, engine: Engine) -> None:
    """A submission made after the final run becomes the board's (its live figure is better),
    but the row keeps the settled points, split as that run's submission earned them: its tests'
    part is not the newer one's."""
    subs = _graded(world, engine)
    run = world.post(world.prof, RUNS, json={"rounds": 1}).json()
    while (offer := claim(world.client)) is not None:
        _post(world.client, offer, JobOutcome.model_validate({"report": sample_report(
            median=1.5, lo=1.4, hi=1.6)}))
    done = world.get(world.prof, f"{RUNS}/{run['id']}").json()
    settled = {g["email"].split("@")[0]: g["score"] for g in done["grades"]}
    newer = world.submit(world.ada, REFERENCE).json()["id"]
    offer = claim(world.client)
    assert offer is not None and offer["job"]["submission_id"] == newer
    report = sample_report(median=3.0, lo=2.9, hi=3.1) | {"test_points": 45, "score": 75}
    _post(world.client, offer, JobOutcome.model_validate({"report": report}))
    board = {e["alias"]: e for e in world.get(
        world.ada, "/api/courses/th/assignments/t1-multiprocessing/leaderboard").json()}
    assert board["ada"]["submission_id"] == subs["ada"], board["ada"]
    assert (board["ada"]["score"], board["ada"]["tests"], board["ada"]["performance"]) == (
        settled["ada"], 60.0, round(settled["ada"] - 60, 2)), board["ada"]
