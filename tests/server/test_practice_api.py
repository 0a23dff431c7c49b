"""Practice runs through the API, with this test playing the runner: a run is offered as the
public tests only, its report is kept on the run (marked, no points, no hidden test), and
nothing that reads grades sees it; the limit holds when twenty requests arrive at once; graded
work is claimed before queued practice; staff read every run, pause practice, and turn the
timing off."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, func, select

from runners.protocol import JobOutcome
from server.db import session_factory
from server.models import Assignment, GradeReportRow, Job, Submission
from server.services.intake import practice
from tests.server.conftest import REFERENCE, RUNNER, World, claim
from tests.server.reports import sample_report
from tests.server.test_pages import browser, csrf

A = "/api/courses/th/assignments/t1-multiprocessing"


def _try(world: World, who: dict[str, str], timed: bool = False) -> Any:
    return world.post(who, f"{A}/practice", files=[("files", ("solution.py", REFERENCE))],
                      data={"timed": "true" if timed else "false"})


def _answer(world: World, offer: dict[str, Any], report: dict[str, Any]) -> None:
    r = world.client.post(f"/api/runner/jobs/{offer['job_id']}/result",
                          json={"report": report},
                          headers={**RUNNER, "X-Job-Token": offer["token"]})
    assert r.status_code == 204, r.text


def _graded_state(world: World, engine: Engine) -> tuple[Any, ...]:
    """Everything that reads grades: the board, the class's submissions, their reports, the CSV
    export, the class statistics."""
    with session_factory(engine)() as s:
        rows = (s.scalar(select(func.count()).select_from(Submission)),
                s.scalar(select(func.count()).select_from(GradeReportRow)))
    stats = world.get(world.prof, f"{A}/stats").json()
    for s in stats["students"]:  # counted apart, in a column of their own (below)
        s.pop("practice_runs")
    return (rows, world.get(world.ada, f"{A}/leaderboard").json(),
            world.get(world.prof, f"{A}/submissions").json(),
            world.get(world.prof, f"{A}/grades.csv").text, stats)


def test_a_practice_run_is_the_public_tests_and_reaches_no_grade(world: World,
                                                                engine: Engine) -> None:
    before = _graded_state(world, engine)
    r = _try(world, world.ada, timed=True)
    assert r.status_code == 201, r.text
    run = r.json()
    assert (run["status"], run["timed"], run["report"]) == ("queued", True, None), run
    offer = claim(world.client)
    assert offer is not None and offer["job"]["practice"] == "timed", offer
    assert offer["job"]["submission_id"] == run["id"]
    got = world.client.get(f"/api/runner/jobs/{offer['job_id']}/submission",
                           headers={**RUNNER, "X-Job-Token": offer["token"]})
    assert got.status_code == 200 and got.content[:2] == b"PK", got.text
    # A report that came back with points and a hidden test's result (a runner of an older
    # protocol grades in full): kept as a practice report, without either.
    report = sample_report(median=1.7, lo=1.6, hi=1.8)
    report["tests"].append({**report["tests"][0], "name": "public_tests/test_public.py::test_y",
                            "hidden": False})
    _answer(world, offer, report)
    seen = world.get(world.ada, f"/api/practice/{run['id']}").json()
    assert (seen["status"], seen["verdict"]) == ("done", "passed"), seen
    kept = seen["report"]
    assert kept["practice"] and (kept["score"], kept["test_points"]) == (0.0, 0.0), kept
    assert [t["name"] for t in kept["tests"]] == ["public_tests/test_public.py::test_y"]
    assert _graded_state(world, engine) == before
    practised = {s["alias"]: s["practice_runs"]
                 for s in world.get(world.prof, f"{A}/stats").json()["students"]}
    assert practised == {"ada": 1, "bob": 0}, practised
    csv_text = world.get(world.prof, f"{A}/stats?format=csv&table=students").text
    assert csv_text.splitlines()[0].endswith('"practice_runs"'), csv_text
    assert [p["id"] for p in world.get(world.ada, f"{A}/practice").json()] == [run["id"]]
    # Another student cannot read it; the staff can, with whose it is.
    assert world.get(world.bob, f"/api/practice/{run['id']}").status_code == 404
    staff = world.get(world.prof, f"{A}/practice/all").json()
    assert [(p["id"], p["student"]) for p in staff] == [(run["id"], "ada@uni.edu")]
    assert world.get(world.ada, f"{A}/practice/all").status_code == 403


def test_the_limit_holds_when_twenty_requests_arrive_at_once(world: World) -> None:
    gate = threading.Barrier(20)

    def one(_: int) -> Any:
        gate.wait()
        return _try(world, world.ada)

    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(one, range(20)))
    codes = sorted(a.status_code for a in answers)
    assert codes == [201] * practice.PER_HOUR + [429] * (20 - practice.PER_HOUR), codes
    refused = next(a for a in answers if a.status_code == 429).json()["detail"]
    assert "practice limit reached" in refused and "next practice run is allowed from" in refused
    assert len(world.get(world.ada, f"{A}/practice").json()) == practice.PER_HOUR
    assert _try(world, world.bob).status_code == 201  # each student's own limit


def test_graded_work_is_claimed_before_queued_practice(world: World, engine: Engine) -> None:
    for who in (world.ada, world.bob):
        for _ in range(5):
            assert _try(world, who).status_code == 201
    sub = world.submit(world.ada, REFERENCE).json()["id"]
    with session_factory(engine)() as s:  # the oldest practice job's message reaches a runner
        first = s.scalar(select(Job.id).where(Job.kind == "practice").order_by(Job.id))
    r = world.client.post(f"/api/runner/jobs/{first}/claim", params={"runner": "test-runner"},
                          headers=RUNNER)
    assert r.status_code == 200, r.text
    assert r.json()["job"]["practice"] is None and r.json()["job"]["submission_id"] == sub


def test_staff_pause_practice_and_turn_its_timing_off(world: World, engine: Engine) -> None:
    until = (datetime.now(UTC) + timedelta(hours=2)).isoformat()
    assert world.client.put(f"{A}/practice-pause", json={"until": until},
                            headers=world.ada).status_code == 403
    r = world.client.put(f"{A}/practice-pause", json={"until": until}, headers=world.prof)
    assert r.status_code == 200 and r.json()["paused_until"] is not None, r.text
    r = _try(world, world.ada)
    assert r.status_code == 409 and "paused until" in r.json()["detail"], r.text
    assert world.client.put(f"{A}/practice-pause", json={"until": None},
                            headers=world.prof).status_code == 200
    with session_factory(engine)() as s, s.begin():
        s.scalars(select(Assignment)).one().practice_timing = False
    r = _try(world, world.ada, timed=True)
    assert r.status_code == 403 and "not timed" in r.json()["detail"], r.text
    assert _try(world, world.ada).status_code == 201
    rules = world.get(world.ada, f"{A}/practice-rules").json()
    assert rules == {"per_hour": practice.PER_HOUR, "per_day": practice.PER_DAY,
                     "timing": False, "profiles": True, "graded_profiles": False,
                     "paused_until": None}, rules


def test_a_run_the_platform_failed_is_tried_again_then_says_so(world: World) -> None:
    run = _try(world, world.ada).json()
    for _ in range(3):
        offer = claim(world.client)
        if offer is None:
            break
        r = world.client.post(f"/api/runner/jobs/{offer['job_id']}/result",
                              content=JobOutcome(platform_error="the node went away")
                              .model_dump_json(),
                              headers={**RUNNER, "X-Job-Token": offer["token"],
                                       "Content-Type": "application/json"})
        assert r.status_code == 204, r.text
    seen = world.get(world.ada, f"/api/practice/{run['id']}").json()
    assert (seen["status"], seen["error"]) == ("error", "the node went away"), seen


def test_a_student_tries_a_file_from_the_assignment_page(world: World) -> None:
    page = "/c/th/t1-multiprocessing"
    b = browser(world)
    form = b.get(page).text
    assert "Try on the runner (not graded)" in form and "with one short timing" in form
    assert "with a profile" in form
    r = b.post(f"{page}/practice", data={"csrf_token": csrf(form), "timed": "on",
                                         "profile": "on"},
               files=[("files", ("solution.py", REFERENCE))])
    assert r.status_code == 303 and r.headers["location"].startswith("/p/"), r.text
    at = r.headers["location"]
    queued = b.get(at).text
    assert "Practice: not graded." in queued and "queued" in queued and "one short timing" in queued
    offer = claim(world.client)
    assert offer is not None and offer["job"]["practice"] == "timed" and offer["job"]["profile"]
    report = sample_report(median=1.5, lo=1.4, hi=1.6)
    report["profile"] = {
        "sampler": "py-spy", "interval_s": 0.01, "seconds": 0.4, "balance": 1.0, "note": None,
        "processes": [{"label": f"process {i}", "started_in_call": i > 1, "samples": 40,
                       "running": 0.9, "waiting": 0.1, "in_mpi": 0.0,
                       "timeline": [[0.0, 0.36, "run"], [0.36, 0.4, "wait"]]}
                      for i in (1, 2)],
        "top": [{"name": "partial_sum", "file": "/sub/solution.py", "line": 13, "share": 0.8,
                 "own": True}],
        # Frame names are the student's processes' own text: a name that is markup stays text.
        "flame": [{"frames": ["parallel_sum (solution.py)", "partial_sum (solution.py)"],
                   "own": [True, True], "samples": 30},
                  {"frames": ["parallel_sum (solution.py)", "<script>x()</script> (pool.py)"],
                   "own": [True, False], "samples": 10}],
        "gpu": {"kernels": 0.7, "copies": 0.1, "host": 0.2, "simulated": True,
                "per_kernel": [{"name": "block_sums", "share": 0.7}],
                "note": "profiled the numba CUDA simulator on this runner's CPU, not a GPU"},
        "cost_s": 1.25}
    report["summary"] = "Practice: not graded · 2/2 public tests passed; speedup 1.50×"
    report["tests"] = [{**report["tests"][0], "name": "public_tests/test_public.py::test_y",
                        "hidden": False}]
    _answer(world, offer, report)
    done = b.get(at).text
    assert "Practice: not graded · 2/2 public tests passed" in done, done
    assert "public_tests/test_public.py::test_y" in done and "Speedup 1.50×" in done
    assert "Where the time went" in done and done.count('class="prof-run"') == 2, done
    assert "partial_sum (your solution.py, line 13)" in done
    assert done.count('class="flame-own"/>') == 2 and done.count('class="flame-lib"/>') == 1
    assert "<script>x()" not in done and "&lt;script&gt;x()" in done
    assert "block_sums 70 %" in done and "not a GPU" in done and "took 1.2 s" in done
    assert f'<a href="{at}">' in b.get(page).text  # listed under "your practice runs"
    assert browser(world, "bob@uni.edu").get(at).status_code == 404
    assert "ada &lt;ada@uni.edu&gt;" in browser(world, "prof@uni.edu", "prof-pass-4821").get(
        at).text


def test_the_instructor_sets_the_limits_and_can_turn_practice_off(world: World) -> None:
    assert world.client.patch(A, json={"practice_per_hour": 2},
                              headers=world.ada).status_code == 403
    assert world.client.patch(A, json={"practice_per_hour": -1},
                              headers=world.prof).status_code == 422
    assert world.client.patch(A, json={"practice_per_hour": 2, "practice_per_day": 3},
                              headers=world.prof).status_code == 200
    codes = [_try(world, world.ada).status_code for _ in range(3)]
    assert codes == [201, 201, 429], codes
    m = "/c/th/t1-multiprocessing/manage"
    prof = browser(world, "prof@uni.edu", "prof-pass-4821")
    r = prof.post(f"{m}/practice", data={"csrf_token": csrf(prof.get(m).text), "per_hour": "0",
                                         "per_day": "3"})
    assert r.status_code == 303, r.text
    r = _try(world, world.bob)
    assert r.status_code == 409 and "turned off" in r.json()["detail"], r.text
    assert world.get(world.bob, f"{A}/practice-rules").json()["timing"] is False  # unticked
    r = prof.post(f"{m}/practice-pause", data={"csrf_token": csrf(prof.get(m).text),
                                               "until": "tomorrow"})
    assert r.status_code == 422 and "with a zone" in r.text


def test_an_instructor_opts_graded_gradings_into_a_profile_and_reads_its_cost(
        world: World) -> None:
    """Off by default; once the instructor opts in, a graded job asks its runner for a profile
    after the timing, the student's submission page draws it, and the manage page says what
    the last ones cost."""
    first = world.submit(world.ada, REFERENCE).json()["id"]
    offer = claim(world.client)
    assert offer is not None and offer["job"]["submission_id"] == first
    assert offer["job"]["profile"] is False and offer["job"]["practice"] is None
    _answer(world, offer, sample_report(median=1.5, lo=1.4, hi=1.6))
    r = world.client.patch(A, json={"graded_profiles": True}, headers=world.ada)
    assert r.status_code == 403, r.text
    r = world.client.patch(A, json={"graded_profiles": True}, headers=world.prof)
    assert r.status_code == 200, r.text
    assert world.get(world.ada, f"{A}/practice-rules").json()["graded_profiles"] is True
    sub = world.submit(world.ada, REFERENCE).json()["id"]
    offer = claim(world.client)
    assert offer is not None and offer["job"]["submission_id"] == sub and offer["job"]["profile"]
    report = sample_report(median=1.6, lo=1.5, hi=1.7)
    report["profile"] = {
        "sampler": "py-spy", "interval_s": 0.01, "seconds": 0.4, "balance": 1.0, "note": None,
        "processes": [{"label": "process 1", "started_in_call": True, "samples": 40,
                       "running": 0.9, "waiting": 0.1, "in_mpi": 0.0,
                       "timeline": [[0.0, 0.4, "run"]]}],
        "top": [], "flame": [{"frames": ["parallel_sum (solution.py)"], "own": [True],
                              "samples": 40}], "cost_s": 2.5}
    _answer(world, offer, report)
    b = browser(world)
    page = b.get(f"/s/{sub}").text
    assert "Where the time went" in page and 'class="flame-own"/>' in page, page
    assert "took 2.5 s of the runner" in page
    assert "Where the time went" not in b.get(f"/s/{first}").text
    manage = browser(world, "prof@uni.edu", "prof-pass-4821").get(
        "/c/th/t1-multiprocessing/manage").text
    assert 'name="graded_profiles" checked' in manage and "the last ones took 2.5 s each" in manage
