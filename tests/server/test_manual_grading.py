"""Grading by a person over the API, on SQLite and PostgreSQL: the rubric and its rules, two TAs
who never grade the same student, items and comments on lines, release, a student's feedback,
an item edited after grading (every total follows, shown before saving), regrade requests with
their limit and answers, and who may do what."""

from __future__ import annotations

import csv
import io
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, select

from runners.protocol import JobOutcome
from runners.settings import REPO_ROOT
from server.db import session_factory
from server.models import Assignment, User
from server.services.lti import passback
from server.services.packages.assignments import read_folder
from server.services.people import users
from tests.server.conftest import REFERENCE, RUNNER, World, claim, login, zip_of
from tests.server.reports import sample_report
from tests.server.test_pages import browser

A = "/api/courses/th/assignments/t1-multiprocessing"


def _graded(world: World) -> dict[str, int]:
    """ada and bob each with a graded submission."""
    subs = {}
    for who in ("ada", "bob"):
        subs[who] = world.submit(getattr(world, who), REFERENCE).json()["id"]
        offer = claim(world.client)
        assert offer is not None and offer["job"] is not None
        r = world.client.post(f"/api/runner/jobs/{offer['job_id']}/result",
                              content=JobOutcome.model_validate(
                                  {"report": sample_report()}).model_dump_json(),
                              headers={**RUNNER, "X-Job-Token": offer["token"],
                                       "Content-Type": "application/json"})
        assert r.status_code == 204, r.text
    return subs


def _tas(world: World, engine: Engine, n: int) -> list[dict[str, str]]:
    out = []
    for k in range(n):
        email = f"ta{k}@uni.edu"
        with session_factory(engine)() as s, s.begin():
            users.create(session=s, email=email, name=f"TA {k}", password="ta-pass-48213")
        tok = login(world.client, email, "ta-pass-48213")
        r = world.client.post("/api/courses/join", json={"join_code": world.join_code},
                              headers=tok)
        assert r.status_code in (200, 201), r.text
        r = world.client.put(f"/api/courses/th/members/{email}", json={"role": "ta"},
                             headers=world.prof)
        assert r.status_code == 200, r.text
        out.append(tok)
    return out


def _rubric(world: World) -> dict[str, int]:
    r = world.client.put(f"{A}/rubric", json={"points": 20, "weight": 0.5, "regrade_limit": 1},
                         headers=world.prof)
    assert r.status_code == 200, r.text
    items = {}
    for title, points in (("uses a collective", 10), ("explains the efficiency", 10),
                          ("a race the tests missed", -5)):
        r = world.post(world.prof, f"{A}/rubric/items", json={
            "title": title, "points": points, "group": "code",
            "description": f"{title}.\nSee the statement."})
        assert r.status_code == 201, r.text
        items[title] = r.json()["id"]
    return items


def test_a_ta_grades_by_rubric_and_the_student_reads_it_once_released(world: World,
                                                                       engine: Engine) -> None:
    c = world.client
    _graded(world)
    items = _rubric(world)
    ta, other = _tas(world, engine, 2)
    # Students and TAs cannot set the rules; students cannot grade.
    assert c.put(f"{A}/rubric", json={"weight": 2}, headers=ta).status_code == 403
    assert world.post(world.ada, f"{A}/grading/next").status_code == 403
    assert world.get(world.ada, f"{A}/rubric").status_code == 403

    mine = world.post(ta, f"{A}/grading/next").json()
    theirs = world.post(other, f"{A}/grading/next").json()
    assert {mine["student"], theirs["student"]} == {"ada@uni.edu", "bob@uni.edu"}
    assert mine["files"]["solution.py"][:1] == REFERENCE.decode().splitlines()[:1]
    assert world.post(ta, f"{A}/grading/next").json()["id"] == mine["id"]  # still mine
    g = f"{A}/grading/{mine['id']}"
    # The other TA cannot change a grade ta holds.
    r = c.put(f"{g}/items/{items['uses a collective']}", headers=other)
    assert r.status_code == 409 and "TA 0 is grading this student" in r.json()["detail"]

    for item in ("uses a collective", "a race the tests missed"):
        assert c.put(f"{g}/items/{items[item]}", headers=ta).status_code == 200
    r = world.post(ta, f"{g}/comments", json={"body": "This loop\nruns serially.",
                                              "file": "solution.py", "line": 3})
    assert r.status_code == 201, r.text
    assert world.post(ta, f"{g}/comments", json={"body": "Well done."}).status_code == 201
    for bad, why in (({"file": "solution.py", "line": 10_000}, "has lines 1 to"),
                     ({"file": "other.py", "line": 1}, "no file"),
                     ({"file": "solution.py"}, "both its file and its line")):
        r = world.post(ta, f"{g}/comments", json={"body": "x", **bad})
        assert r.status_code == 422 and why in r.json()["detail"], r.text
    assert world.post(ta, f"{g}/comments",
                      json={"body": "a\x1b[31m red"}).status_code == 422
    # Every time with its zone, on SQLite too (it stores none).
    held = world.get(ta, g).json()
    times = [held["held_until"], *(x["created_at"] for x in held["comments"])]
    assert all(datetime.fromisoformat(t).utcoffset() == timedelta(0) for t in times), times
    done = world.post(ta, f"{g}/done", json={}).json()
    assert (done["status"], done["points"], done["held_by"]) == ("done", 5.0, None)

    # Nothing reaches the student before release; only an instructor releases.
    student = "ada" if mine["student"] == "ada@uni.edu" else "bob"
    tok = getattr(world, student)
    assert world.get(tok, f"{A}/feedback").status_code == 404
    assert world.post(ta, f"{A}/grading/release", json={}).status_code == 403
    assert world.post(world.prof, f"{A}/grading/release", json={}).status_code == 200
    fb = world.get(tok, f"{A}/feedback").json()
    assert fb["points"] == 5.0 and fb["max_points"] == 20 and fb["weight"] == 0.5
    assert [i["title"] for i in fb["items"]] == ["uses a collective", "a race the tests missed"]
    assert [(x["file"], x["line"]) for x in fb["comments"]] == [(None, None),
                                                                ("solution.py", 3)]
    assert "runs serially" in fb["comments"][1]["body"]
    _totals_carry(world, engine, student, 5.0 * 0.5)
    # A done, released grade changes only through a reopen: an item put on or taken off is
    # refused and every total stays; reopened, changed and done again, every total follows.
    explains = f"{g}/items/{items['explains the efficiency']}"
    r = c.put(explains, headers=ta)
    assert r.status_code == 409 and "open it again" in r.json()["detail"], r.text
    assert c.delete(f"{g}/items/{items['uses a collective']}", headers=ta).status_code == 409
    _totals_carry(world, engine, student, 5.0 * 0.5)
    assert world.post(ta, f"{g}/done", json={"done": False}).status_code == 200
    assert c.put(explains, headers=ta).status_code == 200
    assert world.post(ta, f"{g}/done", json={}).json()["points"] == 15.0
    _totals_carry(world, engine, student, 15.0 * 0.5)
    assert world.post(ta, f"{g}/done", json={"done": False}).status_code == 200
    assert c.delete(explains, headers=ta).status_code == 200
    assert world.post(ta, f"{g}/done", json={}).json()["points"] == 5.0
    _totals_carry(world, engine, student, 5.0 * 0.5)
    # The other student's grade is not done: nothing to see.
    other_student = world.bob if student == "ada" else world.ada
    assert world.get(other_student, f"{A}/feedback").status_code == 404

    # An item edited after grading: shown first, then every grade it is applied to follows.
    item = f"{A}/rubric/items/{items['uses a collective']}"
    r = c.patch(item, params={"dry_run": "true"}, json={"points": 12}, headers=ta)
    assert r.json()["changes"] == 1 and not r.json()["saved"]
    assert world.get(tok, f"{A}/feedback").json()["points"] == 5.0
    r = c.patch(item, json={"points": 12, "unknown": 1}, headers=ta)
    assert r.status_code == 422
    assert c.patch(item, json={"points": 12}, headers=ta).json()["saved"]
    assert world.get(tok, f"{A}/feedback").json()["points"] == 7.0

    # A regrade request about an item; the limit; the answer changes the grade.
    ask = f"{A}/feedback/regrade-requests"
    race = items["a race the tests missed"]
    r = world.post(tok, ask, json={"item_id": race, "reason": "The lock is held;\nsee line 9."})
    assert r.status_code == 201, r.text
    r = world.post(tok, ask, json={"item_id": race, "reason": "again"})
    assert r.status_code == 409 and "wait for an answer" in r.json()["detail"]
    assert world.post(ta, ask, json={"item_id": race, "reason": "x"}).status_code == 403
    assert world.post(other_student, ask, json={"test_name": "hidden/none.py::test_x",
                                                "reason": "x"}).status_code == 404
    listed = world.get(other, "/api/courses/th/regrade-requests").json()
    assert [(x["student"], x["item_id"]) for x in listed] == [(f"{student}@uni.edu", race)]
    assert world.get(tok, "/api/courses/th/regrade-requests").status_code == 403
    r = world.post(other, f"/api/courses/th/regrade-requests/{listed[0]['id']}/answer",
                   json={"answer": "Agreed: no race.", "apply_item": False})
    assert r.status_code == 200 and r.json()["changed"], r.text
    fb = world.get(tok, f"{A}/feedback").json()
    assert fb["points"] == 12.0 and fb["requests"][0]["answer"] == "Agreed: no race."
    _totals_carry(world, engine, student, 12.0 * 0.5)
    r = world.post(other, f"/api/courses/th/regrade-requests/{listed[0]['id']}/answer",
                   json={"answer": "twice"})
    assert r.status_code == 409


def _totals_carry(world: World, engine: Engine, student: str, manual: float) -> None:
    """The released manual points (times the weight) in the grades CSV, Gradescope's
    results.json, the course board's total and what the LMS gradebook is owed."""
    rows = list(csv.DictReader(io.StringIO(world.get(world.prof, f"{A}/grades.csv").text)))
    mine = next(r for r in rows if r["email"] == f"{student}@uni.edu")
    other = next(r for r in rows if r["email"] != f"{student}@uni.edu")
    assert float(mine["manual_points"]) == manual
    assert float(mine["total"]) == float(mine["best_score"]) + manual
    assert other["manual_points"] == "" and float(other["total"]) == float(other["best_score"])
    board = world.get(world.prof, "/api/courses/th/leaderboard").json()
    totals = {e["alias"]: e["total"] for e in board["entries"]}
    assert totals[student] == float(mine["best_score"]) + manual, board
    sid = int(mine["submission_id"])
    results = world.get(world.prof, f"/api/submissions/{sid}/gradescope.json").json()
    assert results["tests"][-1]["score"] == manual and results["tests"][-1]["max_score"] == 10.0
    assert results["score"] == float(mine["best_score"]) + manual
    with session_factory(engine)() as s:
        a = s.scalars(select(Assignment)).one()
        user = s.scalars(select(User).where(User.email == f"{student}@uni.edu")).one()
        assert passback.current_score(s, a.id, user.id) == float(mine["best_score"]) + manual
        assert passback._max_score(s, a.id) == 100 + 10.0


def test_graders_racing_for_the_next_student_each_get_another(world: World,
                                                              engine: Engine) -> None:
    _graded(world)
    _rubric(world)
    tas = _tas(world, engine, 4)
    gate = threading.Barrier(4)

    def take(tok: dict[str, str]) -> Any:
        gate.wait()
        r = world.post(tok, f"{A}/grading/next")
        return None if r.status_code == 204 else r.json()["student"]

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(take, tas))
    assert sorted(g for g in got if g) == ["ada@uni.edu", "bob@uni.edu"], got
    assert got.count(None) == 2


def test_one_grader_pressing_next_many_times_at_once_holds_one_student(world: World,
                                                                       engine: Engine) -> None:
    _graded(world)
    _rubric(world)
    (ta,) = _tas(world, engine, 1)
    gate = threading.Barrier(5)

    def take(_: int) -> Any:
        gate.wait()
        return world.post(ta, f"{A}/grading/next").json()["id"]

    with ThreadPoolExecutor(5) as pool:
        got = set(pool.map(take, range(5)))
    assert len(got) == 1, got
    held = [g for g in world.get(world.prof, f"{A}/grading").json() if g["held_by"]]
    assert len(held) == 1, held


def _package(manual: str, version: str) -> bytes:
    """t1's package, its version and `[manual]` section changed."""
    files = read_folder(REPO_ROOT / "assignments" / "treasure-hunt" / "t1-multiprocessing")
    toml = files["assignment.toml"].decode()
    toml = re.sub(r'(?m)^version = ".*"$', f'version = "{version}"', toml, count=1)
    files["assignment.toml"] = (toml + "\n" + manual).encode()
    return zip_of(files)


def test_a_packages_rubric_starts_the_courses_and_never_overwrites_it(world: World) -> None:
    up = "/api/courses/th/assignments/upload"
    manual = ('[manual]\npoints = 15\nweight = 2\n[[manual.rubric]]\ntitle = "uses a Pool"\n'
              'points = 10\ngroup = "code"\ndescription = "The statement asks for one.\\nSee §2."\n'
              '[[manual.rubric]]\ntitle = "explains the curve"\npoints = 5\n')
    r = world.post(world.prof, up, files={"package": ("p.zip", _package(
        manual.replace("uses a Pool", "uses a \\u001b[31mPool"), "9.0.0"))})
    assert r.status_code == 422 and any(p["key"].startswith("manual.rubric")
                                        for p in r.json()["problems"]), r.text
    r = world.post(world.prof, up, files={"package": ("p.zip", _package(manual, "9.0.0"))})
    assert r.status_code == 201, r.text
    got = world.get(world.prof, f"{A}/rubric").json()
    assert (got["manual_points"], got["manual_weight"]) == (15, 2)
    assert [(i["title"], i["points"], i["group"]) for i in got["items"]] == [
        ("uses a Pool", 10, "code"), ("explains the curve", 5, "")]
    assert got["items"][0]["description"] == "The statement asks for one.\nSee §2."
    # The course edits its rubric; the package's next version leaves it as the course made it.
    world.client.patch(f"{A}/rubric/items/{got['items'][1]['id']}", json={"points": 4},
                       headers=world.prof)
    r = world.post(world.prof, up, files={"package": ("p.zip", _package(
        manual.replace("points = 15", "points = 30"), "9.0.1"))})
    assert r.status_code == 201, r.text
    again = world.get(world.prof, f"{A}/rubric").json()
    assert again["manual_points"] == 15 and [i["points"] for i in again["items"]] == [10, 4]


def test_an_item_edited_after_thirty_gradings_moves_every_total_once(world: World,
                                                                      engine: Engine) -> None:
    c = world.client
    items = _rubric(world)
    collective = items["uses a collective"]
    (ta,) = _tas(world, engine, 1)
    tokens = {}
    for k in range(30):
        r = c.post("/api/auth/register", json={
            "email": f"s{k}@uni.edu", "name": f"S {k}", "alias": f"s{k}",
            "password": "studentpass1", "join_code": world.join_code})
        assert r.status_code == 201, r.text
        tokens[k] = login(c, f"s{k}@uni.edu", "studentpass1")
        assert world.submit(tokens[k], REFERENCE + f"\n# {k}\n".encode()).status_code == 201
    while (r := world.post(ta, f"{A}/grading/next")).status_code == 200:
        g = f"{A}/grading/{r.json()['id']}"
        assert c.put(f"{g}/items/{collective}", headers=ta).status_code == 200
        assert world.post(ta, f"{g}/done", json={}).status_code == 200
    assert r.status_code == 204
    assert world.post(world.prof, f"{A}/grading/release", json={}).status_code == 200

    def totals() -> dict[str, str]:
        rows = csv.DictReader(io.StringIO(world.get(world.prof, f"{A}/grades.csv").text))
        return {row["email"]: row["manual_points"] for row in rows if row["email"][0] == "s"}

    assert set(totals().values()) == {"5.0"}  # 10 points × weight 0.5
    item = f"{A}/rubric/items/{collective}"
    shown = c.patch(item, params={"dry_run": "true"}, json={"points": 4}, headers=ta).json()
    assert shown["changes"] == 30 and set(totals().values()) == {"5.0"}  # nothing saved yet
    assert c.patch(item, json={"points": 4}, headers=ta).json()["changes"] == 30
    assert set(totals().values()) == {"2.0"}
    assert {world.get(tokens[k], f"{A}/feedback").json()["points"] for k in (0, 29)} == {4.0}


def test_anonymous_grading_hides_whose_code_it_is(world: World, engine: Engine) -> None:
    _graded(world)
    (ta,) = _tas(world, engine, 1)
    r = world.client.put(f"{A}/rubric", json={"points": 10, "anonymous": True},
                         headers=world.prof)
    assert r.status_code == 200 and r.json()["anonymous"], r.text
    assert world.client.put(f"{A}/rubric", json={"anonymous": False},
                            headers=ta).status_code == 403
    g = world.post(ta, f"{A}/grading/next").json()
    assert g["student"] == f"student {g['id']}" and g["alias"] is None
    assert [x["student"] for x in world.get(ta, f"{A}/grading").json()] == [g["student"]]
    page = browser(world, "ta0@uni.edu", "ta-pass-48213")
    for url in (f"/c/th/t1-multiprocessing/grading/{g['id']}", "/c/th/t1-multiprocessing/grading"):
        text = page.get(url).text
        assert "ada@uni.edu" not in text and "bob@uni.edu" not in text, url
        assert f"tudent {g['id']}" in text
    # No id that maps to a person: the submissions list and the CSV map submission ids to emails.
    assert g["submission_id"] is None
    assert "/s/" not in page.get(f"/c/th/t1-multiprocessing/grading/{g['id']}").text
    # Its regrade requests say "student N" too, in the API and on the page.
    r = world.post(world.prof, f"{A}/rubric/items", json={
        "title": "style", "points": 5, "group": "code", "description": "Readable."})
    item = r.json()["id"]
    assert world.post(ta, f"{A}/grading/{g['id']}/done", json={}).status_code == 200
    assert world.post(world.prof, f"{A}/grading/release", json={}).status_code == 200
    owner = next(t for t in (world.ada, world.bob)
                 if world.get(t, f"{A}/feedback").status_code == 200)
    r = world.post(owner, f"{A}/feedback/regrade-requests",
                   json={"item_id": item, "reason": "It is readable."})
    assert r.status_code == 201, r.text
    listed = world.get(ta, "/api/courses/th/regrade-requests").json()
    assert [x["student"] for x in listed] == [g["student"]], listed
    text = page.get("/c/th/-/regrades").text
    assert "ada@uni.edu" not in text and "bob@uni.edu" not in text and g["student"] in text


def test_every_grade_changing_act_is_audited_with_what_changed(world: World,
                                                              engine: Engine) -> None:
    """An item put on and one taken off a grade: an audit row each, naming the item and the
    grade's points before and after; a regrade answer that takes an item off records the
    points it moved, not only that something changed."""
    from server.models import AuditLog

    _graded(world)
    items = _rubric(world)  # 20 points: +10, +10, -5
    [ta] = _tas(world, engine, 1)
    held = world.post(ta, f"{A}/grading/next").json()
    g = f"{A}/grading/{held['id']}"
    for title in ("uses a collective", "explains the efficiency", "a race the tests missed"):
        assert world.client.put(f"{g}/items/{items[title]}", headers=ta).status_code == 200
    assert world.client.put(f"{g}/items/{items['uses a collective']}", headers=ta).status_code \
        == 200  # put on again: nothing changes, nothing is logged
    r = world.client.delete(f"{g}/items/{items['explains the efficiency']}", headers=ta)
    assert r.status_code == 200, r.text
    assert world.post(ta, f"{g}/done", json={}).status_code == 200
    assert world.post(world.prof, f"{A}/grading/release", json={}).status_code == 200
    with session_factory(engine)() as s:
        rows = [(r.action, r.detail["title"], r.detail["points_before"], r.detail["points_after"])
                for r in s.scalars(select(AuditLog).where(AuditLog.action.like("manual.item%"))
                                   .order_by(AuditLog.id))]
    assert rows == [("manual.item_applied", "uses a collective", 0.0, 10.0),
                    ("manual.item_applied", "explains the efficiency", 10.0, 20.0),
                    ("manual.item_applied", "a race the tests missed", 20.0, 15.0),
                    ("manual.item_removed", "explains the efficiency", 15.0, 5.0)], rows

    student = getattr(world, held["student"].split("@")[0])
    race = items["a race the tests missed"]
    r = world.post(student, f"{A}/feedback/regrade-requests",
                   json={"item_id": race, "reason": "There is no race."})
    assert r.status_code == 201, r.text
    r = world.post(ta, f"/api/courses/th/regrade-requests/{r.json()['id']}/answer",
                   json={"answer": "Agreed.", "apply_item": False})
    assert r.status_code == 200 and r.json()["changed"], r.text
    with session_factory(engine)() as s:
        answer = s.scalars(select(AuditLog).where(AuditLog.action == "regrade.answer")).one()
        removed = s.scalars(select(AuditLog).where(AuditLog.action == "manual.item_removed")
                            .order_by(AuditLog.id.desc())).first()
    assert answer.detail["changed"] and answer.detail["items"] == [
        {"item": race, "applied": False, "points_before": 5.0, "points_after": 10.0}
    ], answer.detail
    assert removed is not None and removed.detail["title"] == "a race the tests missed"
