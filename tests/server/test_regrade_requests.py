"""Regrade requests in every course, on SQLite and PostgreSQL: in a course with no hand grading a
student asks about a test and about the performance points, and the staff answer by queueing a
regrade; with a rubric, about an item that was not applied, answered by applying it and taking
another off; the staff's list names what each is about; the pages do the same."""

from __future__ import annotations

from sqlalchemy import Engine, func, select

from server.db import session_factory
from server.models import AuditLog, Job, RegradeRequest
from tests.server.conftest import World
from tests.server.test_manual_grading import _graded, _rubric
from tests.server.test_pages import browser, csrf

A = "/api/courses/th/assignments/t1-multiprocessing"
TEST = "hidden/test_hidden.py::test_x"


def test_a_course_without_hand_grading_takes_requests_about_tests_and_performance(
        world: World, engine: Engine) -> None:
    assert world.get(world.ada, f"{A}/regrade-requests").json()["submission_id"] is None
    r = world.post(world.ada, f"{A}/regrade-requests", json={"test_name": TEST, "reason": "x"})
    assert r.status_code == 404 and "no graded submission" in r.json()["detail"]
    subs = _graded(world)
    offer = world.get(world.ada, f"{A}/regrade-requests").json()
    assert offer["submission_id"] == subs["ada"] and offer["items"] == []
    assert offer["tests"] == [{"name": TEST, "outcome": "passed"}] and offer["performance"]
    assert world.get(world.prof, f"{A}/regrade-requests").status_code == 403
    r = world.post(world.ada, f"{A}/regrade-requests",
                   json={"test_name": TEST, "reason": "My answer is right:\nsee the log."})
    assert r.status_code == 201, r.text
    assert r.json()["subject"] == f"the test {TEST}" and r.json()["submission_id"] == subs["ada"]
    r = world.post(world.ada, f"{A}/regrade-requests",
                   json={"performance": True, "reason": "The node was busy."})
    assert r.status_code == 201 and r.json()["subject"] == "the performance points", r.text
    two = world.post(world.ada, f"{A}/regrade-requests", json={
        "performance": True, "test_name": TEST, "reason": "both"})
    assert two.status_code == 422 and "one rubric item, one test" in two.json()["detail"]

    listed = world.get(world.prof, "/api/courses/th/regrade-requests").json()
    assert [(x["student"], x["subject"]) for x in listed] == [
        ("ada@uni.edu", f"the test {TEST}"), ("ada@uni.edu", "the performance points")]
    no_items = world.post(world.prof, f"/api/courses/th/regrade-requests/{listed[0]['id']}/answer",
                          json={"answer": "Applied.", "apply": [1]})
    assert no_items.status_code == 422 and "no hand grade" in no_items.json()["detail"]
    with session_factory(engine)() as s:
        jobs_before = s.scalar(select(func.count()).select_from(Job).where(
            Job.submission_id == subs["ada"])) or 0
    r = world.post(world.prof, f"/api/courses/th/regrade-requests/{listed[1]['id']}/answer",
                   json={"answer": "Timed again on a free node.", "regrade": True})
    assert r.status_code == 200 and r.json()["requeued"] and not r.json()["changed"], r.text
    with session_factory(engine)() as s:
        queued = s.scalars(select(Job).where(Job.submission_id == subs["ada"],
                                             Job.state == "queued")).all()
        assert len(queued) == 1 and s.scalar(select(func.count()).select_from(Job).where(
            Job.submission_id == subs["ada"])) == jobs_before + 1
        audit = s.scalars(select(AuditLog).where(AuditLog.action == "regrade.answer")).one()
        assert audit.detail["requeued"] and audit.detail["performance"]
    mine = world.get(world.ada, f"{A}/regrade-requests").json()["requests"]
    assert [(x["status"], x["answer"]) for x in mine] == [
        ("open", None), ("answered", "Timed again on a free node.")]


def test_an_unapplied_item_is_asked_about_and_any_item_changed(world: World,
                                                               engine: Engine) -> None:
    subs = _graded(world)
    items = _rubric(world)  # regrade limit 1
    ta = world.prof
    r = world.post(ta, f"{A}/grading/next", json={})
    grade = r.json()
    student = world.ada if grade["student"] == "ada@uni.edu" else world.bob
    for title in ("uses a collective", "a race the tests missed"):
        r = world.client.put(f"{A}/grading/{grade['id']}/items/{items[title]}", headers=ta)
        assert r.status_code == 200, r.text
    assert world.post(ta, f"{A}/grading/{grade['id']}/done", json={"done": True}).status_code == 200
    assert world.post(ta, f"{A}/grading/release", json={"released": True}).status_code == 200
    offer = world.get(student, f"{A}/regrade-requests").json()
    shown = {i["title"]: i["applied"] for i in offer["items"]}
    assert shown == {"uses a collective": True, "explains the efficiency": False,
                     "a race the tests missed": True}
    assert offer["submission_id"] in subs.values()
    missed = items["explains the efficiency"]
    r = world.post(student, f"{A}/regrade-requests",
                   json={"item_id": missed, "reason": "The efficiency is in the README."})
    assert r.status_code == 201, r.text
    assert r.json()["subject"] == "the rubric item \u201cexplains the efficiency\u201d"
    listed = world.get(ta, "/api/courses/th/regrade-requests").json()
    assert listed[0]["subject"] == "the rubric item \u201cexplains the efficiency\u201d"
    r = world.post(ta, f"/api/courses/th/regrade-requests/{listed[0]['id']}/answer", json={
        "answer": "Yes, and no race.", "apply_item": True,
        "remove": [items["a race the tests missed"]]})
    assert r.status_code == 200 and r.json()["changed"], r.text
    fb = world.get(student, f"{A}/feedback").json()
    assert fb["points"] == 20.0, fb  # 10 + 10, the -5 taken off
    with session_factory(engine)() as s:
        audit = s.scalars(select(AuditLog).where(AuditLog.action == "regrade.answer")).one()
        assert [(m["item"], m["applied"]) for m in audit.detail["items"]] == [
            (missed, True), (items["a race the tests missed"], False)]
        assert s.scalar(select(func.count()).select_from(RegradeRequest)) == 1


def test_the_pages_ask_and_answer_in_a_course_without_hand_grading(world: World,
                                                                  engine: Engine) -> None:
    _graded(world)
    page = browser(world)
    ask = page.get("/c/th/t1-multiprocessing/regrade").text
    assert f'value="test:{TEST}"' in ask and 'value="performance"' in ask
    escaped = page.post("/c/th/t1-multiprocessing/regrade", data={
        "csrf_token": csrf(ask), "about": "performance", "reason": "busy\x1b[2J node"})
    assert escaped.status_code == 422 and "U+001B, ESC" in escaped.text
    r = page.post("/c/th/t1-multiprocessing/regrade", data={  # a textarea's lines, as sent
        "csrf_token": csrf(ask), "about": "performance", "reason": "<b>busy</b> node\r\nat 9"})
    assert r.status_code == 303, r.text
    mine = page.get("/c/th/t1-multiprocessing/regrade").text
    assert "about the performance points" in mine and "&lt;b&gt;busy&lt;/b&gt; node" in mine
    staff = browser(world, "prof@uni.edu", "prof-pass-4821")
    listing = staff.get("/c/th/-/regrades").text
    assert "the performance points" in listing and "grade the submission again" in listing
    with session_factory(engine)() as s:
        rid = s.scalars(select(RegradeRequest.id)).one()
    r = staff.post(f"/c/th/-/regrades/{rid}", data={
        "csrf_token": csrf(listing), "answer": "Queued again.", "regrade": "yes"})
    assert r.status_code == 303, r.text
    assert "(graded again)" in staff.get("/c/th/-/regrades").text
    assert "your submission is graded again" in page.get("/c/th/t1-multiprocessing/regrade").text
