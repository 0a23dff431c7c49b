"""The class statistics of an assignment, checked against a small class computed by hand: who
started and finished, score summaries, each test's pass rate on the first try and in the end,
its commonest failures grouped, its discrimination, speedups, credit outcomes; the page, the
JSON and the CSV agree; students and other courses' staff are refused."""

from __future__ import annotations

import csv
import io
import statistics
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select

from runners.protocol import TestOutcome, Verdict
from server.db import session_factory
from server.models import Assignment, AssignmentVersion, Job
from server.services.grades import statistics as stats_service
from tests.server.conftest import World, login
from tests.server.reports import sample_report, store
from tests.server.test_pages import browser

pytestmark = pytest.mark.concurrent
URL = "/api/courses/th/assignments/t1-multiprocessing/stats"
OK = (True, "")


def report(a: tuple[bool, str], b: tuple[bool, str], c: tuple[bool, str], score: float,
           speedup: float | None = None, credit: str | None = None) -> dict:  # type: ignore[type-arg]
    """A report whose three hidden tests pass or fail with these messages."""
    every = a[0] and b[0] and c[0]
    r = sample_report(passed=every, median=speedup or 1.0, lo=(speedup or 1.0) * 0.9,
                      hi=(speedup or 1.0) * 1.1, credit=credit if every else None)
    r["tests"] = [{"name": f"hidden/test_hidden.py::test_{n}",
                   "outcome": (TestOutcome.PASSED if ok else TestOutcome.FAILED).value,
                   "verdict": (Verdict.PASSED if ok else Verdict.FAILED).value,
                   "message": msg, "hidden": True, "weight": 1 / 3, "duration_s": 0.1}
                  for n, (ok, msg) in zip("abc", (a, b, c), strict=True)]
    r["score"] = score
    return r


def _student(client: TestClient, world: World, name: str) -> dict[str, str]:
    r = client.post("/api/auth/register", json={"email": f"{name}@uni.edu", "name": name,
                                                "password": "studentpass1", "alias": name,
                                                "join_code": world.join_code})
    assert r.status_code == 201, r.text
    return login(client, f"{name}@uni.edu", "studentpass1")


@pytest.fixture
def klass(world: World, engine: Engine) -> World:
    """ada, bob, carol, dan, fay submit (ada and carol twice); eve never does."""
    c = world.client
    who = {"ada": world.ada, "bob": world.bob,
           **{n: _student(c, world, n) for n in ("carol", "dan", "eve", "fay")}}
    fail = (False, "AssertionError: expected 7, got 9")
    plan = [
        ("ada", report(OK, (False, "expected 3, got 4"), (False, "x"), 20)),
        ("bob", report(OK, OK, fail, 40)),
        ("carol", report((False, "boom"), (False, "expected 5, got 6"), (False, "y"), 0)),
        ("dan", report(OK, OK, OK, 60, speedup=1.0, credit="held")),
        ("fay", report(OK, (False, "AssertionError at /tmp/pytest-3/x.py:12"),
                       (False, "AssertionError: expected 11, got 12"), 20)),
        ("ada", report(OK, OK, OK, 90, speedup=1.8, credit="credited")),
        ("carol", report(OK, OK, OK, 100, speedup=2.2, credit="credited")),
    ]
    for name, rep in plan:
        r = c.post("/api/courses/th/assignments/t1-multiprocessing/submissions",
                   files=[("files", ("solution.py", b"def find(*a, **k):\n    return 0\n"))],
                   headers=who[name])
        assert r.status_code == 201, r.text
        store(engine, r.json()["id"], rep)
    return world


def test_the_numbers_are_the_ones_computed_by_hand(klass: World) -> None:
    st = klass.client.get(URL, headers=klass.prof).json()
    assert (st["enrolled"], st["submitted"], st["passed"], st["full_points"]) == (6, 5, 3, 1)
    assert st["not_started"] == ["eve"]
    best = [90, 40, 100, 60, 20]  # ada, bob, carol, dan, fay
    assert st["best_score"]["n"] == 5 and st["best_score"]["mean"] == pytest.approx(62.0)
    assert st["best_score"]["median"] == 60 and st["best_score"]["sd"] == pytest.approx(
        statistics.stdev(best))
    assert st["latest_score"]["mean"] == pytest.approx(62.0)  # each latest is their best here
    tests = {t["name"].rsplit("_", 1)[1]: t for t in st["tests"]}
    #          first try: ada1 bob carol1 dan fay   final: ada2 bob carol2 dan fay
    assert (tests["a"]["first_try_passed"], tests["a"]["final_passed"]) == (4, 5)
    assert (tests["b"]["first_try_passed"], tests["b"]["final_passed"]) == (2, 4)
    assert (tests["c"]["first_try_passed"], tests["c"]["final_passed"]) == (1, 3)
    assert all(t["first_try_total"] == t["final_total"] == 5 for t in tests.values())
    assert [t["name"][-1] for t in st["tests"]] == ["c", "b", "a"]  # the weakest first
    # Discrimination: passing c (ada, carol, dan) goes with the high final scores.
    assert tests["c"]["discrimination"] == pytest.approx(
        statistics.correlation([1, 0, 1, 1, 0], [90, 40, 100, 60, 20]))
    assert tests["b"]["discrimination"] == pytest.approx(
        statistics.correlation([1, 1, 1, 1, 0], [90, 40, 100, 60, 20]))
    assert tests["a"]["discrimination"] is None  # everyone passed it in the end
    # bob's and fay's failures of c differ only in their numbers: one group.
    [group] = tests["c"]["failures"]
    assert (group["message"], group["count"]) == ("AssertionError: expected N, got N", 2)
    assert tests["b"]["failures"][0]["message"] == "AssertionError at <path>:N"
    assert st["speedups"] == [1.0, 1.8, 2.2]  # dan's held one is his best passed one
    # What the points come from: dan's held one (1.0 measured) earns none yet: it counts 0.
    assert st["credited_speedups"] == [0.0, 1.8, 2.2], st["credited_speedups"]
    assert st["credit"] == {"credited": 2, "held": 1}
    [point] = st["scaling"]  # sample_report's one point at 2 workers: 1.0, 1.8, 2.2
    assert (point["workers"], point["median_speedup"], point["students"]) == (2, 1.8, 3)
    assert (point["quartile_low"], point["quartile_high"]) == pytest.approx((1.4, 2.0))
    assert sum(n for _, n in st["submissions_per_hour"]) == 7
    assert st["hours_to_first_pass"]["n"] == 3


def test_a_flat_test_is_flagged() -> None:
    assert stats_service.normalised("at 0x7f3a in /usr/lib/x.so line 12\nmore") == \
        "at <address> in <path> line N"
    t = stats_service.TestStat("t", True, 5, 5, 5, 5, 0.05, [])
    assert t.flagged and not stats_service.TestStat("t", True, 5, 5, 5, 5, None, []).flagged


def test_the_page_and_the_csv_say_the_same(klass: World) -> None:
    prof = browser(klass, "prof@uni.edu", "prof-pass-4821")
    page = prof.get("/c/th/t1-multiprocessing/stats")
    assert page.status_code == 200
    text = page.text
    assert "eve" in text and "AssertionError: expected N, got N" in text
    assert text.count("<svg") == 4  # scores, speedups, scaling curve, submissions per hour
    # Figures in words: the credited speedup named as such, credit outcomes as a student reads
    # them (no `capped 1`), one student not "1 students".
    assert "median credited speedup" in text and "1 held for review" in text, text
    assert "2 speedup credited" in text and "1 students" not in text
    assert "the class's middle half 1.40–2.00" in text  # the curve's bar at 2 workers
    assert "1/5 (20 %)" in text and "3/5 (60 %)" in text  # test c, first try and final
    rows = list(csv.DictReader(io.StringIO(klass.client.get(
        URL, params={"format": "csv", "table": "tests"}, headers=klass.prof).text)))
    assert [(r["test"][-1], r["first_try_passed"], r["final_passed"]) for r in rows] == \
        [("c", "1", "3"), ("b", "2", "4"), ("a", "4", "5")]
    students = list(csv.DictReader(io.StringIO(klass.client.get(
        URL, params={"format": "csv"}, headers=klass.prof).text)))
    assert {r["name"]: (r["best_score"], r["full_points"]) for r in students}["carol"] == \
        ("100.0", "yes")


def test_queue_wait_and_grading_time_per_day(klass: World, engine: Engine) -> None:
    """Seven gradings over two days, and one still running (not counted): the percentiles as
    PostgreSQL's percentile_cont takes them (linear between ranks), on either database."""
    day1, day2 = datetime(2026, 11, 2, 9, tzinfo=UTC), datetime(2026, 11, 3, 23, tzinfo=UTC)
    plan = [(day1, 10, 5), (day1, 40, 100), (day1, 20, 5), (day1, 30, 6),
            (day2, 1, 60), (day2, 3, 60), (day2, 2, 60)]
    with session_factory(engine)() as db, db.begin():
        jobs = db.scalars(select(Job).where(Job.kind == "grade").order_by(Job.id)).all()
        assert len(jobs) == 7
        for job, (day, wait, run) in zip(jobs, plan, strict=True):
            job.created_at = day
            job.claimed_at = day + timedelta(seconds=wait)
            job.finished_at = day + timedelta(seconds=wait + run)
        db.add(Job(submission_id=jobs[0].submission_id, queue="cpu", state="running",
                   created_at=day1, claimed_at=day1 + timedelta(hours=2)))
    st = klass.client.get(URL, headers=klass.prof).json()
    got = [(d["day"][:10], d["gradings"], d["queue_wait_p50_s"], d["queue_wait_p95_s"],
            d["grading_p50_s"], d["grading_p95_s"]) for d in st["per_day"]]
    # day 1: waits 10 20 30 40, p95 at rank 2.85: 30 + 0.85 × 10; runs 5 5 6 100
    assert got == [("2026-11-02", 4, 25, pytest.approx(38.5), 5.5, pytest.approx(85.9)),
                   ("2026-11-03", 3, 2, pytest.approx(2.9), 60, 60)]
    assert statistics.quantiles([10, 20, 30, 40], n=20, method="inclusive")[18] == \
        pytest.approx(38.5)
    page = browser(klass, "prof@uni.edu", "prof-pass-4821").get(
        "/c/th/t1-multiprocessing/stats").text
    assert "<td>2026-11-02</td><td>4</td>" in page and "<td>85.9 s</td>" in page


def test_students_see_only_their_own_history(klass: World) -> None:
    assert klass.client.get(URL, headers=klass.ada).status_code == 403
    ada = browser(klass)
    assert ada.get("/c/th/t1-multiprocessing/stats").status_code == 403
    assert ada.get("/c/th/-/stats").status_code == 403
    mine = ada.get("/c/th/t1-multiprocessing").text  # her two attempts: 20, then 90 at 1.80×
    assert "1.80×" in mine and "2.20×" not in mine and "1.00×" not in mine


def test_the_course_page_lists_assignments_and_the_students_to_watch(klass: World,
                                                                     engine: Engine) -> None:
    c, prof = klass.client, klass.prof
    due = (datetime.now(UTC) + timedelta(hours=24)).isoformat()
    assert c.patch("/api/courses/th/assignments/t1-multiprocessing", json={"deadline": due},
                   headers=prof).status_code == 200
    r = c.post("/api/courses/th/assignments/import", json={"path": "treasure-hunt/t2-mpi"},
               headers=prof)
    assert r.status_code == 201, r.text
    with session_factory(engine)() as db, db.begin():  # as its validation would leave it
        version = db.scalars(select(AssignmentVersion).join(
            Assignment, Assignment.id == AssignmentVersion.assignment_id).where(
            Assignment.slug == "t2-mpi")).one()
        version.status = "ready"
        version.assignment.current_version_id = version.id
    fay = login(c, "fay@uni.edu", "studentpass1")
    wrong = report(OK, (False, "x"), (False, "y"), 20)
    for _ in range(4):  # fay: five graded attempts at t1, none passed
        r = c.post("/api/courses/th/assignments/t1-multiprocessing/submissions",
                   files=[("files", ("solution.py", b"x = 1\n"))], headers=fay)
        store(engine, r.json()["id"], wrong)
    # ada: 90 of 100 on t1, then 20 on t2 (the later one: t1 has the deadline): falling
    r = c.post("/api/courses/th/assignments/t2-mpi/submissions",
               files=[("files", ("solution.py", b"x = 1\n"))], headers=klass.ada)
    assert r.status_code == 201, r.text
    store(engine, r.json()["id"], report(OK, (False, "x"), (False, "y"), 20))
    st = c.get("/api/courses/th/stats", headers=prof).json()
    t1, t2 = st["assignments"]
    assert (t1["slug"], t1["submitted"], t1["passed"], t1["enrolled"]) == \
        ("t1-multiprocessing", 5, 3, 6)
    assert t1["median_best_score"] == 60 and (t2["submitted"], t2["passed"]) == (1, 0)
    why = sorted((w["name"], w["why"]) for w in st["watchlist"])
    assert [n for n, _ in why] == ["ada", "eve", "fay"], why
    assert why[0][1].startswith("falling: 20% of the points on Treasure hunt 2") and \
        why[0][1].endswith("after 90% on average before")
    assert why[1][1].startswith("no submission to Treasure hunt 1") and "due in 2" in why[1][1]
    assert why[2][1].startswith("5 or more graded attempts at Treasure hunt 1")
    page = browser(klass, "prof@uni.edu", "prof-pass-4821").get("/c/th/-/stats").text
    assert "Students to watch" in page and "falling: 20% of the points" in page
    assert c.get("/api/courses/th/stats", headers=klass.bob).status_code == 403
