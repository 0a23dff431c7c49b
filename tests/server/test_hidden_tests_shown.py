"""When a student reads a hidden test's whole message (server/services/grades/visibility.py), on
SQLite and PostgreSQL: never by default (the message written on purpose; the staff see both),
after each student's own deadline (an extension holds it back for that student), always, and a
package's choice for one test over the course's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm.attributes import flag_modified

from runners.protocol import JobOutcome
from server.db import session_factory
from server.models import Assignment, AssignmentVersion, User
from tests.server.conftest import REFERENCE, RUNNER, World, claim
from tests.server.reports import sample_report
from tests.server.test_pages import browser

A = "/api/courses/th/assignments/t1-multiprocessing"
WRITTEN = "Ten numbers: wrong answer"
WHOLE = "Ten numbers: assert 45 == 46"


def _failed(world: World, who: dict[str, str]) -> int:
    sid = int(world.submit(who, REFERENCE).json()["id"])
    report: dict[str, Any] = sample_report(passed=False)
    report["tests"][0].update(message=WRITTEN, held_message=WHOLE)
    offer = claim(world.client)
    assert offer is not None
    r = world.client.post(f"/api/runner/jobs/{offer['job_id']}/result",
                          content=JobOutcome.model_validate({"report": report}).model_dump_json(),
                          headers={**RUNNER, "X-Job-Token": offer["token"],
                                   "Content-Type": "application/json"})
    assert r.status_code == 204, r.text
    return sid


def _read(world: World, who: dict[str, str], sid: int) -> dict[str, Any]:
    test = world.get(who, f"/api/submissions/{sid}").json()["report"]["tests"][0]
    assert isinstance(test, dict)
    return test


def test_hidden_messages_are_shown_as_the_course_and_the_package_say(world: World,
                                                                     engine: Engine) -> None:
    ada, bob = _failed(world, world.ada), _failed(world, world.bob)
    seen = _read(world, world.ada, ada)
    assert seen["message"] == WRITTEN and "held_message" not in seen  # never, by default
    staff = _read(world, world.prof, ada)
    assert (staff["message"], staff["held_message"]) == (WRITTEN, WHOLE)
    assert WHOLE not in browser(world).get(f"/s/{ada}").text

    shown = f"{A}/hidden-tests"
    assert world.client.put(shown, json={"hidden_tests": "always"},
                            headers=world.ada).status_code == 403
    # Late submissions earn points (the default, accept): the values would earn late points.
    r = world.client.put(shown, json={"hidden_tests": "after_deadline"}, headers=world.prof)
    assert r.status_code == 422 and "resubmit for points" in r.json()["detail"], r.text
    assert world.client.patch(A, json={"late_policy": "reject"},
                              headers=world.prof).status_code == 200
    r = world.client.put(shown, json={"hidden_tests": "after_deadline"}, headers=world.prof)
    assert r.status_code == 200 and r.json()["hidden_tests_shown"] == "after_deadline"
    assert _read(world, world.ada, ada)["message"] == WRITTEN  # no deadline: none has passed
    r = world.client.patch(A, json={"deadline": "2026-01-01T00:00:00+00:00"}, headers=world.prof)
    assert r.status_code == 200, r.text
    r = world.client.put(f"{A}/extensions/bob@uni.edu",
                         json={"deadline": "2099-01-01T00:00:00+00:00", "reason": "ill"},
                         headers=world.prof)
    assert r.status_code == 200, r.text
    assert _read(world, world.ada, ada)["message"] == WHOLE  # her deadline has passed
    assert _read(world, world.bob, bob)["message"] == WRITTEN  # his has not
    assert WHOLE in browser(world).get(f"/s/{ada}").text
    # Late work earning points again (a policy changed afterwards): held back again.
    for policy, penalty, whole in (("accept", None, False), ("penalty", 0.5, False),
                                   ("penalty", 1.0, True), ("reject", None, True)):
        change = {"late_policy": policy} | ({"late_penalty": penalty} if penalty else {})
        assert world.client.patch(A, json=change, headers=world.prof).status_code == 200
        assert _read(world, world.ada, ada)["message"] == (WHOLE if whole else WRITTEN), change

    r = world.client.put(shown, json={"hidden_tests": "always"}, headers=world.prof)
    assert _read(world, world.bob, bob)["message"] == WHOLE
    r = world.client.put(shown, json={"hidden_tests": "sometimes"}, headers=world.prof)
    assert r.status_code == 422
    # The package names this test "never": it holds over the course's "always".
    with session_factory(engine)() as s, s.begin():
        version = s.scalars(select(AssignmentVersion)).one()
        version.manifest = {**version.manifest, "feedback": {
            "tests": {"hidden/test_hidden.py::test_x": "never"}}}
        flag_modified(version, "manifest")
    assert _read(world, world.bob, bob)["message"] == WRITTEN


def test_at_the_deadlines_very_instant_it_has_not_passed(world: World, engine: Engine,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """One boundary for every deadline rule (extensions.passed): at the instant itself a
    submission is on time and the hidden values are still held; the microsecond after, both
    turn (they read `>` and `>=` before)."""
    from server.services.grades import extensions, visibility
    from server.services.intake import submissions

    ada = _failed(world, world.ada)
    world.client.patch(A, json={"late_policy": "reject"}, headers=world.prof)
    world.client.put(f"{A}/hidden-tests", json={"hidden_tests": "after_deadline"},
                     headers=world.prof)
    at = datetime(2026, 12, 1, 23, 59, tzinfo=UTC)
    assert world.client.patch(A, json={"deadline": at.isoformat()},
                              headers=world.prof).status_code == 200
    for instant, passed in ((at, False), (at + timedelta(microseconds=1), True)):
        for module in (submissions, visibility):
            monkeypatch.setattr(module, "now", lambda t=instant: t)
        assert extensions.passed(at, instant) is passed
        assert (_read(world, world.ada, ada)["message"] == WHOLE) is passed
        with session_factory(engine)() as s:
            a = s.scalars(select(Assignment)).one()
            user = s.scalars(select(User).where(User.email == "ada@uni.edu")).one()
            assert submissions.is_late(session=s, assignment=a, user=user) is passed
