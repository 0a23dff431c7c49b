"""Late days on SQLite and PostgreSQL: a submission 26 hours late spends 2 days once the student
confirms; the last day, then one more, is penalised; an extension moves the count; days given
back are audited; twenty uploads at once never spend more than the pool."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, select

from server.db import session_factory
from server.models import AuditLog, Submission
from tests.server.conftest import REFERENCE, REPO_ROOT, World, finish_validation, zip_of
from tests.server.test_upload_races import _at_once, live  # noqa: F401 (a fixture)

C = "/api/courses/th"
A = f"{C}/assignments/t1-multiprocessing"


def _policy(world: World, pool: int, per_assignment: int | None = None) -> None:
    r = world.client.put(f"{C}/late-days", headers=world.prof,
                         json={"pool": pool, "per_assignment": per_assignment})
    assert r.status_code == 200, r.text


def _deadline(world: World, hours_ago: float, url: str = A) -> None:
    at = datetime.now(UTC) - timedelta(hours=hours_ago)
    r = world.client.patch(url, headers=world.prof, json={"deadline": at.isoformat()})
    assert r.status_code == 200, r.text


def _left(world: World, who: dict[str, str]) -> int:
    (mine,) = world.get(who, f"{C}/late-days").json()
    return int(mine["left"])


def _upload(world: World, who: dict[str, str], spend: bool, extra: bytes = b"",
            url: str = A) -> object:
    return world.client.post(f"{url}/submissions", headers=who,
                             params={"spend_late_days": "true"} if spend else {},
                             files=[("files", ("solution.py", REFERENCE + extra))])


def test_26_hours_late_spends_two_days_once_confirmed(world: World, engine: Engine) -> None:
    _policy(world, 3)
    _deadline(world, 26)
    q = world.get(world.ada, f"{A}/late-days").json()
    assert (q["needed"], q["extra"], q["covered"]) == (2, 2, True)
    assert q["said"] == ("this upload uses 2 of your 3 remaining late days; after that the late "
                         "penalty applies")
    r = _upload(world, world.ada, spend=False)
    assert r.status_code == 409 and "uses 2 of your 3 remaining late days" in r.json()["detail"]
    with session_factory(engine)() as s:
        assert s.scalars(select(Submission)).all() == []  # nothing stored
    r = _upload(world, world.ada, spend=True)
    assert r.status_code == 201, r.text
    assert r.json()["late"] is False
    with session_factory(engine)() as s:
        assert s.scalars(select(Submission.late_days)).one() == 2
    assert _left(world, world.ada) == 1 and _left(world, world.bob) == 3
    again = world.get(world.ada, f"{A}/late-days").json()
    assert (again["extra"], again["covered"]) == (0, True)  # already taken by this assignment
    assert _upload(world, world.ada, spend=False, extra=b"\n").status_code == 201
    assert _left(world, world.ada) == 1
    staff = world.get(world.prof, f"{C}/late-days").json()
    assert {b["email"]: b["left"] for b in staff} == {"ada@uni.edu": 1, "bob@uni.edu": 3}


def test_the_last_day_then_one_more_is_penalised(world: World, engine: Engine) -> None:
    _policy(world, 2)
    _deadline(world, 26)
    assert _upload(world, world.ada, spend=True).json()["late"] is False
    assert _left(world, world.ada) == 0
    _deadline(world, 50)  # now three days late: one more than is left
    q = world.get(world.ada, f"{A}/late-days").json()
    assert not q["covered"] and "needs 1 more late day, more than your 0 remaining" in q["said"]
    r = _upload(world, world.ada, spend=True, extra=b"\n")
    assert r.status_code == 201 and r.json()["late"] is True  # the late policy applies
    with session_factory(engine)() as s:
        assert sorted(s.scalars(select(Submission.late_days))) == [0, 2]
    assert _left(world, world.ada) == 0


def test_the_most_per_assignment_and_a_reject_policy(world: World) -> None:
    _policy(world, 5, per_assignment=1)
    _deadline(world, 26)
    r = world.client.patch(A, headers=world.prof, json={"late_policy": "reject"})
    assert r.status_code == 200, r.text
    q = world.get(world.ada, f"{A}/late-days").json()
    assert not q["covered"] and "more than the 1 late days one assignment may take" in q["said"]
    r = _upload(world, world.ada, spend=True)
    assert r.status_code == 403 and "takes no late submissions" in r.json()["detail"]
    _deadline(world, 20)  # one day late: covered, even where late work is refused
    assert _upload(world, world.ada, spend=True).status_code == 201


def test_an_extension_moves_the_count(world: World, engine: Engine) -> None:
    _policy(world, 3)
    _deadline(world, 26)
    assert _upload(world, world.ada, spend=True).status_code == 201
    assert _left(world, world.ada) == 1
    until = (datetime.now(UTC) - timedelta(hours=2)).isoformat()
    r = world.client.put(f"{A}/extensions/ada@uni.edu", headers=world.prof,
                         json={"deadline": until, "reason": "ill"})
    assert r.status_code in (200, 201), r.text
    with session_factory(engine)() as s:
        sub = s.scalars(select(Submission)).one()
        assert (sub.late_days, sub.late) == (1, False)
    assert _left(world, world.ada) == 2


def test_days_given_back_are_audited(world: World, engine: Engine) -> None:
    _policy(world, 1)
    r = world.post(world.ada, f"{C}/late-days/grants",
                   json={"email": "ada@uni.edu", "days": 5, "reason": "mine"})
    assert r.status_code == 403
    r = world.post(world.prof, f"{C}/late-days/grants",
                   json={"email": "ada@uni.edu", "days": 2, "reason": "a family emergency"})
    assert r.status_code == 201 and r.json()["left"] == 3, r.text
    bad = world.post(world.prof, f"{C}/late-days/grants",
                     json={"email": "nobody@uni.edu", "days": 2, "reason": "x"})
    assert bad.status_code == 404
    with session_factory(engine)() as s:
        log = s.scalars(select(AuditLog).where(AuditLog.action == "late_days.grant")).one()
        assert log.detail == {"student": "ada@uni.edu", "days": 2, "reason": "a family emergency"}


def test_twenty_uploads_at_once_never_spend_more_than_the_pool(
        world: World, engine: Engine, live: str) -> None:  # noqa: F811
    # A second assignment: two that each need both of the pool's two days.
    folder = REPO_ROOT / "assignments/treasure-hunt/t1-multiprocessing"
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    files["assignment.toml"] = files["assignment.toml"].replace(
        b'slug = "t1-multiprocessing"', b'slug = "t1-again"')
    r = world.post(world.prof, f"{C}/assignments/upload",
                   files={"package": ("p.zip", zip_of(files))})
    assert r.status_code == 201, r.text
    finish_validation(world.client)
    _policy(world, 2)
    _deadline(world, 26)
    _deadline(world, 26, url=f"{C}/assignments/t1-again")
    sends = [(world.ada, REFERENCE + f"\n# {i}\n".encode()) for i in range(20)]
    codes = _at_once(live, sends, query="?spend_late_days=true", urls=[
        f"{A}/submissions" if i % 2 else f"{C}/assignments/t1-again/submissions"
        for i in range(20)])
    assert set(codes) == {201}, codes
    with session_factory(engine)() as s:
        subs = s.scalars(select(Submission)).all()
        covered = {sub.assignment_id for sub in subs if sub.late_days}
        assert len(covered) == 1, covered  # one assignment took both days, the other is late
        assert all(sub.late == (sub.assignment_id not in covered) for sub in subs)
    assert _left(world, world.ada) == 0


def test_the_pages_say_what_an_upload_spends_and_the_staff_set_and_give_days(
        world: World, engine: Engine) -> None:
    from tests.server.test_pages import browser, csrf

    prof = browser(world, "prof@uni.edu", "prof-pass-4821")
    people = prof.get("/c/th/-/members").text
    r = prof.post("/c/th/-/late-days", data={"csrf_token": csrf(people), "pool": "3",
                                             "per_assignment": ""})
    assert r.status_code == 303, r.text
    _deadline(world, 26)
    student = browser(world)
    assert "Late days: <strong>3</strong> of 3 left" in student.get("/").text
    page = student.get("/c/th/t1-multiprocessing").text
    assert "This upload uses 2 of your 3 remaining late days; after that the late penalty " \
           "applies." in page and 'name="spend_late_days"' in page
    url = "/c/th/t1-multiprocessing/submit"
    r = student.post(url, data={"csrf_token": csrf(page)},
                     files={"files": ("solution.py", REFERENCE)})
    assert r.status_code == 409 and "confirm to spend them" in r.text
    r = student.post(url, data={"csrf_token": csrf(page), "spend_late_days": "yes"},
                     files={"files": ("solution.py", REFERENCE)})
    assert r.status_code == 303, r.text
    assert "Late days: <strong>1</strong> of 3 left" in student.get("/").text
    people = prof.get("/c/th/-/members").text
    assert "<th>late days left</th>" in people
    r = prof.post("/c/th/-/late-days/grant", data={
        "csrf_token": csrf(people), "email": "ada@uni.edu", "days": "two", "reason": "x"})
    assert r.status_code == 422 and "give 1 to 365 days" in r.text
    r = prof.post("/c/th/-/late-days/grant", data={
        "csrf_token": csrf(people), "email": "ada@uni.edu", "days": "2", "reason": "ill"})
    assert r.status_code == 303
    assert "Late days: <strong>3</strong> of 5 left" in student.get("/").text
    refused = student.post("/c/th/-/late-days", data={"csrf_token": csrf(page), "pool": "99"})
    assert refused.status_code == 403
