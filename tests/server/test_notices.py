"""Notifications in the page and by e-mail through a real SMTP server (aiosmtpd), on SQLite and
PostgreSQL: a slow grading told, a regrade-all telling each of 30 students once, a mail server
down for a while losing nothing, a bounce logged and not retried, each user's choices (off, a
daily digest), an answered regrade request, announcements, and who may post one."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from runners.protocol import GradeReport
from server.db import session_factory
from server.models import (
    Assignment,
    Course,
    Enrollment,
    MailMessage,
    Notification,
    Submission,
    User,
    now,
)
from server.services.grades import grading
from server.services.notices import mail
from server.services.people import users
from server.settings import ServerSettings
from tests.server.conftest import REFERENCE, REPO_ROOT, World, claim
from tests.server.reports import sample_report
from tests.server.smtp import MailServer

PUBLIC = "https://grading.example.edu"


@pytest.fixture
def smtp() -> Iterator[MailServer]:
    server = MailServer(refuse={"bounce@uni.edu"}).start()
    yield server
    server.stop()


@pytest.fixture
def settings(tmp_path: Path, smtp: MailServer) -> ServerSettings:
    return ServerSettings(database_url="sqlite://", artifacts_dir=tmp_path / "artifacts",
                          assignments_dir=REPO_ROOT / "assignments",
                          runner_token="runner-secret-1234", broker_url="memory://",
                          max_upload_bytes=64 * 1024, public_url=PUBLIC,
                          smtp_host="127.0.0.1", smtp_port=smtp.port, smtp_security="none",
                          mail_from="grades@example.edu")


def _send(world: World) -> int:
    app = world.client.app
    return mail.send_due(app.state.sessions, app.state.settings)  # type: ignore[attr-defined]


def _graded(engine: Engine, sub_id: int, score: float = 90.0, took_s: float = 300) -> None:
    """The submission's grading took `took_s` and gave `score` (as a runner's result would)."""
    report = sample_report()
    report["score"] = score
    with session_factory(engine)() as s:
        sub = s.get(Submission, sub_id)
        assert sub is not None
        sub.created_at = now() - timedelta(seconds=took_s)
        grading.store_report(session=s, sub=sub, report=GradeReport.model_validate(report))
        s.commit()


def _bell(world: World, who: dict[str, str]) -> dict:  # type: ignore[type-arg]
    r = world.get(who, "/api/notifications")
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_a_slow_grading_is_told_in_the_page_and_by_mail_a_quick_one_in_the_page_only(
        world: World, engine: Engine, smtp: MailServer) -> None:
    slow = world.submit(world.ada, REFERENCE).json()["id"]
    quick = world.submit(world.ada, REFERENCE + b"\n").json()["id"]
    _graded(engine, slow, took_s=300)
    _graded(engine, quick, took_s=20)  # watched in the page: nothing to tell
    bell = _bell(world, world.ada)
    assert bell["unread"] == 1
    (n,) = bell["notifications"]
    assert n["kind"] == "graded" and n["link"] == f"/s/{slow}" and "90 of 100 points" in n["title"]
    assert _bell(world, world.bob)["unread"] == 0
    assert _send(world) == 1 and _send(world) == 0  # once
    (msg,) = smtp.messages
    assert msg["To"] == "ada@uni.edu" and msg["From"] == "grades@example.edu"
    assert msg["Subject"].strip() == n["title"]
    text = msg.get_content()
    assert f"{PUBLIC}/s/{slow}" in text and "runner-secret" not in text
    r = world.post(world.ada, "/api/notifications/read", json={"id": n["id"]})
    assert r.json() == {"marked": 1} and _bell(world, world.ada)["unread"] == 0
    other = world.post(world.bob, "/api/notifications/read", json={"id": n["id"]})
    assert other.status_code == 404


def test_a_regrade_all_tells_each_of_30_students_once(world: World, engine: Engine,
                                                      smtp: MailServer) -> None:
    subs = [world.submit(world.ada, REFERENCE).json()["id"]]
    subs += [world.submit(world.bob, REFERENCE).json()["id"]]
    with session_factory(engine)() as s, s.begin():
        course = s.scalars(select(Course)).one()
        for k in range(28):
            u = users.create(session=s, email=f"s{k}@uni.edu", name=f"S{k}",
                             password="studentpass1")
            s.add(Enrollment(user_id=u.id, course_id=course.id, role="student"))
    from tests.server.conftest import login

    for k in range(28):
        tok = login(world.client, f"s{k}@uni.edu", "studentpass1")
        for extra in (b"", b"\n"):
            r = world.submit(tok, REFERENCE + extra)
            assert r.status_code == 201, r.text
            subs.append(r.json()["id"])
    for sid in subs:  # each grading watched in the page: no "graded" notice
        _graded(engine, sid, score=90.0, took_s=10)
    assert _send(world) == 0
    r = world.post(world.prof, "/api/courses/th/assignments/t1-multiprocessing/regrade")
    assert r.status_code == 202 and r.json()["queued"] == len(subs)
    for sid in subs:  # every grading again, each a little lower
        _graded(engine, sid, score=80.0, took_s=10)
    assert _send(world) == 30
    assert len(smtp.messages) == 30 and len({m["To"] for m in smtp.messages}) == 30
    assert all(m["Subject"].strip() == "Treasure hunt 1: a chunked sum with multiprocessing.Pool: your "
               "grade changed" for m in smtp.messages), smtp.messages[0]["Subject"]
    assert "now has 80 of 100 points (it had 90)" in smtp.messages[0].get_content()
    assert _bell(world, world.ada)["unread"] == 1


def test_a_mail_server_down_delays_and_loses_nothing_a_bounce_is_not_retried(
        world: World, engine: Engine, smtp: MailServer) -> None:
    with session_factory(engine)() as s, s.begin():
        course = s.scalars(select(Course)).one()
        u = users.create(session=s, email="bounce@uni.edu", name="B", password="studentpass1")
        s.add(Enrollment(user_id=u.id, course_id=course.id, role="student"))
    smtp.stop()
    r = world.post(world.prof, "/api/courses/th/announcements",
                   json={"title": "Deadline moved", "body": "To Friday.\nSee the statement."})
    assert r.status_code == 201, r.text
    assert _send(world) == 0
    with session_factory(engine)() as s:
        waiting = s.scalars(select(MailMessage)).all()
        assert len(waiting) == 3 and all(m.sent_at is None and m.attempts == 1 for m in waiting)
        assert all("could not be reached" in (m.last_error or "") for m in waiting)
    assert _send(world) == 0  # not due yet: it waits before trying again
    smtp.start()
    with session_factory(engine)() as s, s.begin():
        for m in s.scalars(select(MailMessage)):
            m.next_try_at = now()  # the wait is over
    assert _send(world) == 2
    assert sorted(m["To"] for m in smtp.messages) == ["ada@uni.edu", "bob@uni.edu"]
    with session_factory(engine)() as s:
        refused = s.scalars(select(MailMessage).where(MailMessage.refused.is_(True))).one()
        assert refused.sent_at is None and "bounce@uni.edu" in (refused.last_error or "")
    assert _send(world) == 0 and len(smtp.messages) == 2


def test_choices_turn_mail_off_or_into_a_daily_digest(world: World, engine: Engine,
                                                      smtp: MailServer) -> None:
    r = world.client.put("/api/notifications/settings", headers=world.ada,
                         json={"email": {"announcement": "digest"}, "grade_wait_s": 0})
    assert r.status_code == 200 and r.json()["grade_wait_s"] == 0, r.text
    assert {k["kind"]: k["email"] for k in r.json()["kinds"]}["announcement"] == "digest"
    r = world.client.put("/api/notifications/settings", headers=world.bob,
                         json={"email": {"announcement": "off"}})
    assert r.status_code == 200
    bad = world.client.put("/api/notifications/settings", headers=world.bob,
                           json={"email": {"announcement": "hourly"}})
    assert bad.status_code == 422 and "off, now, digest" in bad.json()["detail"]
    for title in ("First", "Second"):
        assert world.post(world.prof, "/api/courses/th/announcements",
                          json={"title": title}).status_code == 201
    sub = world.submit(world.ada, REFERENCE).json()["id"]
    _graded(engine, sub, took_s=5)  # ada asked to hear of every grading
    assert _send(world) == 1  # the grade at once; the announcements wait for the digest
    assert smtp.messages[0]["Subject"].endswith("graded, 90 of 100 points")
    with session_factory(engine)() as s, s.begin():
        for m in s.scalars(select(MailMessage).where(MailMessage.digest.is_(True))):
            m.created_at = now() - timedelta(seconds=mail.DIGEST_S + 1)
    assert _send(world) == 1
    digest = smtp.messages[1]
    assert digest["To"] == "ada@uni.edu" and digest["Subject"] == "paragrade: 2 notifications"
    assert "First" in digest.get_content() and "Second" in digest.get_content()
    assert [n["title"] for n in _bell(world, world.bob)["notifications"]] == [
        "Treasure hunt: Second", "Treasure hunt: First"]  # bob: in the page only


def test_announcements_are_for_staff_to_post_and_every_student_to_read(world: World,
                                                                       engine: Engine) -> None:
    r = world.post(world.ada, "/api/courses/th/announcements", json={"title": "hi"})
    assert r.status_code == 403
    r = world.post(world.prof, "/api/courses/th/announcements", json={
        "title": "A fix to test 3", "body": "Resubmit if it failed.",
        "assignment": "t1-multiprocessing"})
    assert r.status_code == 201, r.text
    listed = world.get(world.bob, "/api/courses/th/announcements").json()
    assert [(a["title"], a["assignment_id"] is not None) for a in listed] == [
        ("A fix to test 3", True)]
    (n,) = _bell(world, world.bob)["notifications"]
    assert n["link"] == "/c/th#announcements"
    assert n["title"] == ("Treasure hunt, Treasure hunt 1: a chunked sum with "
                          "multiprocessing.Pool: A fix to test 3")
    assert _bell(world, world.prof)["unread"] == 0  # the staff are not told their own news
    with session_factory(engine)() as s:
        assert s.scalars(select(Notification)).all() and s.scalars(select(User)).all()


def test_an_answered_regrade_request_is_told(world: World, engine: Engine,
                                            smtp: MailServer) -> None:
    sub = world.submit(world.ada, REFERENCE).json()["id"]
    _graded(engine, sub, took_s=5)
    A = "/api/courses/th/assignments/t1-multiprocessing"
    r = world.post(world.ada, f"{A}/regrade-requests", json={"performance": True,
                                                             "reason": "busy node"})
    assert r.status_code == 201, r.text
    r = world.post(world.prof, f"/api/courses/th/regrade-requests/{r.json()['id']}/answer",
                   json={"answer": "Timed again.", "regrade": True})
    assert r.status_code == 200, r.text
    (n,) = _bell(world, world.ada)["notifications"]
    assert n["kind"] == "regrade_answered" and n["body"] == "Timed again."
    assert n["title"].endswith("about the performance points was answered; the submission is "
                               "graded again")
    assert _send(world) == 1 and smtp.messages[0]["To"] == "ada@uni.edu"
    assert claim(world.client) is not None  # the regrade is queued


def test_the_pages_ring_the_bell_open_and_choose(world: World, engine: Engine) -> None:
    from server.services.notices import notify
    from tests.server.test_pages import XSS, browser, csrf

    staff = browser(world, "prof@uni.edu", "prof-pass-4821")
    home = staff.get("/").text
    r = staff.post("/c/th/-/announcements", data={"csrf_token": csrf(home), "title": XSS,
                                                   "body": "Line one.\nLine two."})
    assert r.status_code == 303, r.text
    student = browser(world)
    page = student.get("/").text
    assert 'aria-label="notifications: 1 unread"' in page and "<script>alert" not in page
    assert "&lt;script&gt;alert" in page  # the announcement on the course card, escaped
    listing = student.get("/notifications").text
    nid = int(listing.split('href="/n/')[1].split('"')[0])
    opened = student.get(f"/n/{nid}", follow_redirects=False)
    assert opened.status_code == 303 and opened.headers["location"] == "/c/th#announcements"
    assert 'aria-label="notifications: 0 unread"' in student.get("/").text
    with session_factory(engine)() as s, s.begin():  # a link elsewhere is never followed
        ada = s.scalars(select(User).where(User.email == "ada@uni.edu")).one()
        odd = notify.notify(session=s, user_id=ada.id, kind="announcement", key="odd",
                            title="odd", link="//evil.example/")
        odd_id = odd.id
    assert student.get(f"/n/{odd_id}", follow_redirects=False).headers["location"] == \
        "/notifications"
    r = student.post("/notifications/settings", data={
        "csrf_token": csrf(listing), "email-announcement": "off", "grade_wait_s": "0"})
    assert r.status_code == 303
    saved = world.get(world.ada, "/api/notifications/settings").json()
    assert saved["grade_wait_s"] == 0 and {k["kind"]: k["email"] for k in saved["kinds"]}[
        "announcement"] == "off"
    bad = student.post("/notifications/settings", data={
        "csrf_token": csrf(listing), "email-announcement": "hourly"})
    assert bad.status_code == 422 and "off, now, digest" in bad.text
    refused = student.post("/c/th/-/announcements", data={"csrf_token": csrf(listing),
                                                           "title": "mine"})
    assert refused.status_code == 403


def test_a_deadline_a_day_away_is_told_once_to_students_without_a_passing_submission(
        world: World, engine: Engine) -> None:
    from server.models import Extension
    from server.services.grades import reminders

    sub = world.submit(world.bob, REFERENCE).json()["id"]
    _graded(engine, sub, took_s=5)  # bob passes: nothing to remind him of
    with session_factory(engine)() as s, s.begin():
        a = s.scalars(select(Assignment)).one()
        a.deadline = now() + timedelta(hours=20)
    with session_factory(engine)() as s, s.begin():
        assert reminders.remind_due(session=s) == 1
        assert reminders.remind_due(session=s) == 0  # once
    (n,) = _bell(world, world.ada)["notifications"]
    assert n["kind"] == "deadline" and "due in about 20 h" in n["title"]
    assert n["link"] == "/c/th/t1-multiprocessing"
    assert [x["kind"] for x in _bell(world, world.bob)["notifications"]] == []
    # A student whose extension puts their deadline beyond the day is not told yet.
    with session_factory(engine)() as s, s.begin():
        a = s.scalars(select(Assignment)).one()
        u = users.create(session=s, email="cy@uni.edu", name="Cy", password="studentpass1")
        s.add(Enrollment(user_id=u.id, course_id=a.course_id, role="student"))
        s.add(Extension(assignment_id=a.id, user_id=u.id, deadline=now() + timedelta(days=3),
                        reason="ill"))
    with session_factory(engine)() as s, s.begin():
        assert reminders.remind_due(session=s) == 0
