"""What a course needs around the grader: roles (a TA sees and regrades, never changes policy),
per-student extensions (late marks and scores follow them), a roster imported from the LMS's
CSV, and the course board over every task."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, select

from server.db import session_factory
from server.models import AuditLog, Submission
from server.services.people import users
from tests.server.conftest import REFERENCE, World, finish_validation, login
from tests.server.reports import sample_report, store
from tests.server.test_pages import browser, csrf

T1 = "/api/courses/th/assignments/t1-multiprocessing"


def _account(engine: Engine, email: str, *, instructor: bool = False) -> None:
    with session_factory(engine)() as s, s.begin():
        users.create(session=s, email=email, name=email.split("@")[0], password="ta-pass-5930",
                     is_instructor=instructor)


def _ta(world: World, engine: Engine) -> dict[str, str]:
    _account(engine, "tia@uni.edu")
    r = world.client.put("/api/courses/th/members/tia@uni.edu", json={"role": "ta"},
                         headers=world.prof)
    assert r.status_code == 200 and r.json()["role"] == "ta", r.text
    return login(world.client, "tia@uni.edu", "ta-pass-5930")


def test_a_ta_sees_and_regrades_but_changes_no_policy(world: World, engine: Engine) -> None:
    ta = _ta(world, engine)
    sid = world.submit(world.ada, REFERENCE).json()["id"]
    store(engine, sid, sample_report(median=1.9, lo=1.8, hi=2.0, credit="held"))
    # Sees: another student's submission and report, the course's list, reviews, members.
    r = world.get(ta, f"/api/submissions/{sid}")
    assert r.status_code == 200 and r.json()["report"]["verdict"] == "passed"
    listed = world.get(ta, f"{T1}/submissions").json()
    assert [(s["id"], s["student"]) for s in listed] == [(sid, "ada@uni.edu")]
    assert world.get(ta, f"{T1}/reviews").status_code == 200
    assert world.get(ta, f"{T1}/grades.csv").status_code == 200
    assert {m["email"] for m in world.get(ta, "/api/courses/th/members").json()} >= {
        "tia@uni.edu", "ada@uni.edu", "prof@uni.edu"}
    board = world.get(ta, f"{T1}/leaderboard").json()
    assert board[0]["submission_id"] == sid  # staff see which submission stands
    assert "tia" not in {e["alias"] for e in board}  # staff are never ranked
    # Regrades: one, and all.
    assert world.post(ta, f"/api/submissions/{sid}/regrade").status_code == 202
    assert world.post(ta, f"{T1}/regrade").status_code == 202
    # Changes nothing that is policy.
    refused = [
        world.client.patch(T1, json={"quota_count": 99}, headers=ta),
        world.post(ta, "/api/courses/th/assignments/import",
                   json={"path": "treasure-hunt/t2-mpi"}),
        world.post(ta, f"/api/submissions/{sid}/review", json={"decision": "grant"}),
        world.client.put(f"{T1}/extensions/ada@uni.edu", headers=ta,
                         json={"deadline": "2099-01-01T00:00:00+00:00"}),
        world.client.put("/api/courses/th/members/bob@uni.edu", json={"role": "ta"}, headers=ta),
        world.post(ta, "/api/courses/th/roster", files={"roster": ("r.csv", b"email\nx@y.edu\n")}),
    ]
    assert [r.status_code for r in refused] == [403] * len(refused), [r.text for r in refused]
    # Pages: the TA's manage page has submissions and regrade, no policy form.
    b = browser(world, "tia@uni.edu", "ta-pass-5930")
    page = b.get("/c/th/t1-multiprocessing/manage")
    assert page.status_code == 200 and "Regrade all" in page.text
    assert "manage/policy" not in page.text and "Grant the extension" not in page.text
    assert b.get("/c/th").status_code == 200 and "Import a package" not in b.get("/c/th").text
    r = b.post("/c/th/t1-multiprocessing/manage/policy", data={
        "late_policy": "accept", "late_penalty": 0, "quota_count": 5, "quota_window_min": 60,
        "speedup_min": 1, "speedup_full": 2, "csrf_token": csrf(page.text)})
    assert r.status_code == 403


def test_students_reach_no_staff_route(world: World) -> None:
    sid = world.submit(world.bob, REFERENCE).json()["id"]
    for method, url in (("GET", "/api/courses/th/members"), ("GET", f"{T1}/submissions"),
                        ("GET", f"{T1}/extensions"), ("POST", f"{T1}/regrade"),
                        ("POST", f"/api/submissions/{sid}/regrade")):
        r = world.client.request(method, url, headers=world.ada)
        assert r.status_code in (403, 404), (url, r.status_code)
    assert world.get(world.ada, f"/api/submissions/{sid}").status_code == 404  # not confirmed


def test_roles_change_only_by_instructors_and_a_course_keeps_one(world: World,
                                                                  engine: Engine) -> None:
    r = world.client.put("/api/courses/th/members/prof@uni.edu", json={"role": "ta"},
                         headers=world.prof)
    assert r.status_code == 409 and "at least one instructor" in r.json()["detail"]
    r = world.client.put("/api/courses/th/members/ada@uni.edu", json={"role": "instructor"},
                         headers=world.prof)
    assert r.status_code == 422 and "not an instructor account" in r.json()["detail"]
    r = world.client.put("/api/courses/th/members/nobody@uni.edu", json={"role": "ta"},
                         headers=world.prof)
    assert r.status_code == 404
    r = world.client.put("/api/courses/th/members/ada@uni.edu", json={"role": "owner"},
                         headers=world.prof)
    assert r.status_code == 422
    _ta(world, engine)
    with session_factory(engine)() as s:
        logged = s.scalars(select(AuditLog.detail).where(AuditLog.action == "member.role")).all()
    assert logged == [{"from": None, "to": "ta"}]


def _late_world(world: World, policy: str) -> None:
    past = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    r = world.client.patch(T1, json={"deadline": past, "late_policy": policy,
                                     "late_penalty": 0.5}, headers=world.prof)
    assert r.status_code == 200, r.text


def test_an_extension_makes_submissions_on_time_and_rescores_them(world: World,
                                                                  engine: Engine) -> None:
    _late_world(world, "penalty")
    sid = world.submit(world.ada, REFERENCE).json()["id"]
    store(engine, sid, sample_report())  # 90 points before the penalty
    assert world.get(world.ada, f"/api/submissions/{sid}").json()["score"] == 45
    until = (datetime.now(UTC) + timedelta(days=2)).replace(microsecond=0)
    r = world.client.put(f"{T1}/extensions/ada@uni.edu", headers=world.prof,
                         json={"deadline": until.isoformat(), "reason": "illness"})
    assert r.status_code == 200, r.text
    assert r.json()["deadline"].startswith(until.strftime("%Y-%m-%dT%H:%M"))
    got = world.get(world.ada, f"/api/submissions/{sid}").json()
    assert (got["late"], got["score"]) == (False, 90)
    assert world.get(world.ada, f"{T1}/leaderboard").json()[0]["score"] == 90
    assert world.get(world.ada, T1).json()["your_deadline"].startswith(until.strftime("%Y-%m-%d"))
    assert world.get(world.bob, T1).json()["your_deadline"] is None
    # Her next upload is on time; Bob's is late.
    assert world.submit(world.ada, REFERENCE).json()["late"] is False
    assert world.submit(world.bob, REFERENCE).json()["late"] is True
    listed = world.get(world.prof, f"{T1}/extensions").json()
    assert [(x["email"], x["reason"]) for x in listed] == [("ada@uni.edu", "illness")]
    # Revoked: late again, and the penalty is back.
    r = world.client.delete(f"{T1}/extensions/ada@uni.edu", headers=world.prof)
    assert r.status_code == 204, r.text
    got = world.get(world.ada, f"/api/submissions/{sid}").json()
    assert (got["late"], got["score"]) == (True, 45)
    with session_factory(engine)() as s:
        actions = s.scalars(select(AuditLog.action).where(AuditLog.action.like("extension.%"))
                            .order_by(AuditLog.id)).all()
    assert actions == ["extension.grant", "extension.revoke"]


def test_an_extension_opens_a_closed_assignment_for_one_student(world: World) -> None:
    _late_world(world, "reject")
    assert world.submit(world.ada, REFERENCE).status_code == 403
    until = (datetime.now(UTC) + timedelta(hours=5)).isoformat()
    r = world.client.put(f"{T1}/extensions/ada@uni.edu", headers=world.prof,
                         json={"deadline": until})
    assert r.status_code == 200, r.text
    assert world.submit(world.ada, REFERENCE).status_code == 201
    assert world.submit(world.bob, REFERENCE).status_code == 403


@pytest.mark.parametrize(("body", "email", "status", "says"), [
    ({"deadline": "2020-01-01T00:00:00+00:00"}, "ada@uni.edu", 422, "after the assignment"),
    ({"deadline": "2099-01-01T00:00:00"}, "ada@uni.edu", 422, "time zone"),
    ({"deadline": "9999-12-31T23:59:00-12:00"}, "ada@uni.edu", 422, "out of range"),
    ({"deadline": "2099-01-01T00:00:00+00:00"}, "prof@uni.edu", 404, "no student"),
    ({"deadline": "2099-01-01T00:00:00+00:00"}, "ghost@uni.edu", 404, "no student"),
    ({"deadline": "2099-01-01T00:00:00+00:00", "reason": "x" * 501}, "ada@uni.edu", 422, "500"),
])
def test_a_bad_extension_is_refused_with_a_reason(world: World, body: dict[str, str], email: str,
                                                  status: int, says: str) -> None:
    _late_world(world, "accept")
    r = world.client.put(f"{T1}/extensions/{email}", headers=world.prof, json=body)
    assert r.status_code == status and says in r.text, r.text
    assert world.get(world.prof, f"{T1}/extensions").json() == []


def test_no_extension_without_a_deadline(world: World) -> None:
    r = world.client.put(f"{T1}/extensions/ada@uni.edu", headers=world.prof,
                         json={"deadline": "2099-01-01T00:00:00+00:00"})
    assert r.status_code == 422 and "no deadline" in r.json()["detail"]


ROSTER = ("\ufeffFirst name;Surname;Email address;Alias\n"
          "Ada;Lovelace;ADA@uni.edu;countess\n"      # enrolled already: alias updated
          "Carl;Gauss;carl@uni.edu;\n"               # an account, not enrolled: enrolled
          "Dora;Explorer;dora@uni.edu;dora\n"        # no account: invited
          "Eve;;not-an-email;\n"                     # refused
          "Dora;Again;dora@uni.edu;\n"               # refused: the same email twice
          "Fay;;fay@uni.edu;bad<alias>\n"            # refused: the alias
          "Prof;;prof@uni.edu;\n"                    # staff: unchanged
          ";;;\n").encode()


def test_a_roster_enrolls_invites_and_refuses_row_by_row(world: World, engine: Engine) -> None:
    _account(engine, "carl@uni.edu")

    def upload(data: bytes) -> dict:  # type: ignore[type-arg]
        r = world.post(world.prof, "/api/courses/th/roster", files={"roster": ("r.csv", data)})
        assert r.status_code == 200, r.text
        return dict(r.json())

    first = upload(ROSTER)
    assert [(r["line"], r["email"], r["outcome"]) for r in first["rows"]] == [
        (2, "ada@uni.edu", "updated"), (3, "carl@uni.edu", "enrolled"),
        (4, "dora@uni.edu", "invited"), (5, "not-an-email", "refused"),
        (6, "dora@uni.edu", "refused"), (7, "fay@uni.edu", "refused"),
        (8, "prof@uni.edu", "unchanged")]
    assert first["counts"] == {"updated": 1, "enrolled": 1, "invited": 1, "refused": 3,
                               "unchanged": 1}
    again = upload(ROSTER)  # idempotent
    assert [r["outcome"] for r in again["rows"]] == ["unchanged"] * 3 + ["refused"] * 3 + [
        "unchanged"]
    people = {m["email"]: m for m in world.get(world.prof, "/api/courses/th/members").json()}
    assert people["ada@uni.edu"]["alias"] == "countess"
    assert (people["carl@uni.edu"]["role"], people["carl@uni.edu"]["on_roster"]) == (
        "student", True)
    assert people["dora@uni.edu"]["role"] is None
    # Dora registers with the join code: she is in, with the roster's alias.
    r = world.client.post("/api/auth/register", json={
        "email": "Dora@uni.edu", "name": "Dora", "password": "studentpass1",
        "join_code": world.join_code})
    assert r.status_code == 201, r.text
    people = {m["email"]: m for m in world.get(world.prof, "/api/courses/th/members").json()}
    assert (people["dora@uni.edu"]["role"], people["dora@uni.edu"]["alias"]) == ("student", "dora")


@pytest.mark.parametrize(("data", "says"), [
    (b"name,alias\nAda,a\n", "no email column"),
    ("email\nada@uni.edu\n".encode("utf-16"), "not UTF-8"),
    (b"", "empty"),
])
def test_a_roster_that_is_no_roster_is_refused_and_stores_nothing(world: World, data: bytes,
                                                                   says: str) -> None:
    r = world.post(world.prof, "/api/courses/th/roster", files={"roster": ("r.csv", data)})
    assert r.status_code == 422 and says in r.json()["detail"], r.text
    assert all(m["role"] for m in world.get(world.prof, "/api/courses/th/members").json())


def test_the_roster_page_shows_each_row(world: World) -> None:
    b = browser(world, "prof@uni.edu", "prof-pass-4821")
    course = b.get("/c/th").text
    assert "<title>Treasure hunt · paragrade</title>" in course and course.count('id="lms"') == 1
    page = b.get("/c/th/-/members")
    assert page.status_code == 200 and "Import the roster" in page.text
    r = b.post("/c/th/-/members/roster", data={"csrf_token": csrf(page.text)},
               files={"roster": ("r.csv", b"email,name\ngus@uni.edu,Gus\nnope,No\n")})
    assert r.status_code == 200
    assert "gus@uni.edu" in r.text and "invited" in r.text and "not an email address" in r.text


def _course_with_two_tasks(world: World) -> str:
    r = world.post(world.prof, "/api/courses/th/assignments/import",
                   json={"path": "treasure-hunt/t2-mpi"})
    assert r.status_code == 201, r.text
    finish_validation(world.client)
    return str(r.json()["slug"])


def test_the_course_board_adds_up_every_task(world: World, engine: Engine) -> None:
    t2 = _course_with_two_tasks(world)
    board = world.get(world.ada, "/api/courses/th/leaderboard").json()
    assert [t["slug"] for t in board["tasks"]] == ["t1-multiprocessing", t2]
    assert board["entries"] == []
    a1 = world.submit(world.ada, REFERENCE).json()["id"]
    store(engine, a1, sample_report(median=3.0, lo=2.9, hi=3.1))
    b1 = world.submit(world.bob, REFERENCE).json()["id"]
    store(engine, b1, sample_report(median=1.5, lo=1.4, hi=1.6, credit="held"))
    b2 = world.post(world.bob, f"/api/courses/th/assignments/{t2}/submissions",
                    files=[("files", ("solution.py", REFERENCE))]).json()["id"]
    store(engine, b2, sample_report(median=2.0, lo=1.9, hi=2.1))
    board = world.get(world.ada, "/api/courses/th/leaderboard").json()
    rows = [(e["alias"], e["rank"], e["total"], e["solved"], e["you"]) for e in board["entries"]]
    assert rows == [("bob", 1, 150.0, 2, False), ("ada", 2, 90.0, 1, True)]
    bob, ada = board["entries"]
    assert bob["tasks"][0]["mark"] == "held for review" and bob["tasks"][0]["rank"] is None
    assert ada["tasks"][0]["rank"] == 1 and ada["tasks"][1] is None
    # Ada solves the second task: the board follows (a new version of one task's board).
    a2 = world.post(world.ada, f"/api/courses/th/assignments/{t2}/submissions",
                    files=[("files", ("solution.py", REFERENCE))]).json()["id"]
    store(engine, a2, sample_report(median=2.5, lo=2.4, hi=2.6))
    board = world.get(world.bob, "/api/courses/th/leaderboard").json()
    assert [(e["alias"], e["rank"], e["total"], e["you"]) for e in board["entries"]] == [
        ("ada", 1, 180.0, False), ("bob", 2, 150.0, True)]
    # A review that grants Bob's held speedup: his task points and total follow it.
    r = world.post(world.prof, f"/api/submissions/{b1}/review", json={"decision": "grant"})
    assert r.status_code == 200, r.text
    bob = next(e for e in world.get(world.bob, "/api/courses/th/leaderboard").json()["entries"]
               if e["you"])
    assert bob["tasks"][0]["score"] == r.json()["score"] and bob["tasks"][0]["rank"] is not None
    assert bob["total"] == round(sum(t["score"] for t in bob["tasks"]), 2)


def test_equal_totals_share_a_rank_and_more_tasks_come_first() -> None:
    from server.models import Assignment
    from server.services.grades.leaderboard import Board, Entry, course_board

    def entry(user: int, score: float) -> Entry:
        return Entry(rank=1, tied=False, user_id=user, alias=f"s{user}", submission_id=user,
                     speedup=2.0, ci_low=1.9, ci_high=2.1, score=score)

    t1 = Board([entry(1, 100), entry(2, 60), entry(3, 40), entry(4, 70)])
    t2 = Board([entry(2, 40), entry(3, 60), entry(5, 10)])
    board = course_board([(Assignment(slug="t1", title="T1"), t1),
                          (Assignment(slug="t2", title="T2"), t2)])
    got = [(e.alias, e.rank, e.tied, e.total, e.solved) for e in board.entries]
    assert got[:3] == [("s2", 1, True, 100, 2), ("s3", 1, True, 100, 2), ("s1", 3, False, 100, 1)]
    assert [(e.alias, e.rank) for e in board.entries[3:]] == [("s4", 4), ("s5", 5)]
    assert [t.slug for t in board.tasks] == ["t1", "t2"]


def test_the_course_board_page_is_live_and_for_the_course_only(world: World,
                                                               engine: Engine) -> None:
    _course_with_two_tasks(world)
    sid = world.submit(world.ada, REFERENCE).json()["id"]
    store(engine, sid, sample_report())
    b = browser(world)
    page = b.get("/c/th/-/board")
    assert page.status_code == 200
    assert 'data-events="/c/th/-/board/events"' in page.text and "ada (you)" in page.text
    assert "Course board" in b.get("/").text
    _account(engine, "out@uni.edu")
    outsider = login(world.client, "out@uni.edu", "ta-pass-5930")
    assert world.get(outsider, "/api/courses/th/leaderboard").status_code == 403


def test_a_late_submission_then_extension_is_saved_with_its_original_time(world: World,
                                                                        engine: Engine) -> None:
    """The extension re-reads lateness from the stored upload time, not the time of the grant."""
    _late_world(world, "penalty")
    sid = world.submit(world.ada, REFERENCE).json()["id"]
    with session_factory(engine)() as s, s.begin():
        sub = s.get(Submission, sid)
        assert sub is not None
        sub.created_at = datetime.now(UTC) + timedelta(hours=3)  # after the extension's end
    until = (datetime.now(UTC) + timedelta(hours=2)).isoformat()
    r = world.client.put(f"{T1}/extensions/ada@uni.edu", headers=world.prof,
                         json={"deadline": until})
    assert r.status_code == 200
    assert world.get(world.ada, f"/api/submissions/{sid}").json()["late"] is True
