"""A grading whose speedup the platform judged unreliable (the node short of cores) is graded
again once, later, by the reaper; its new report replaces the marked one, higher or lower."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, select

from runners.protocol import JobOutcome
from server import reaper
from server.models import Job, Submission, now
from server.services.fleet import retiming
from tests.server.conftest import REFERENCE, RUNNER, World, claim
from tests.server.reports import sample_report
from tests.server.test_pages import browser

BOARD = "/api/courses/th/assignments/t1-multiprocessing/leaderboard"


def _sweep(world: World, after_s: int) -> None:
    app = world.client.app
    reaper.sweep(app.state.sessions, app.state.dispatcher, lease_s=60,  # type: ignore[attr-defined]
                 max_attempts=3, grace_s=60, retime_after_s=after_s)


def _graded(world: World, sid: int, **report: object) -> None:
    """Play the runner: claim the submission's job and post `report` as its result."""
    offer = claim(world.client)
    assert offer is not None and offer["job"]["submission_id"] == sid, offer
    outcome = JobOutcome.model_validate({"report": sample_report(**report)}).model_dump_json()  # type: ignore[arg-type]
    r = world.client.post(f"/api/runner/jobs/{offer['job_id']}/result", content=outcome,
                          headers={**RUNNER, "X-Job-Token": offer["token"],
                                   "Content-Type": "application/json"})
    assert r.status_code == 204, r.text


def _marks(world: World) -> dict[str, tuple[float, str | None]]:
    return {e["alias"]: (e["speedup"], e["mark"]) for e in world.get(world.ada, BOARD).json()}


SHORT = "measured while the node was short of cores"


def _finished_ago(engine: Engine, sid: int, seconds: float) -> None:
    from server.db import session_factory

    with session_factory(engine)() as s:
        sub = s.get(Submission, sid)
        assert sub is not None and sub.finished_at is not None
        sub.finished_at = now() - timedelta(seconds=seconds)
        s.commit()


def _jobs(engine: Engine, sid: int) -> list[tuple[str, int]]:
    from server.db import session_factory

    with session_factory(engine)() as s:
        return [(j.state, j.priority) for j in s.scalars(
            select(Job).where(Job.submission_id == sid).order_by(Job.id))]


def test_an_interfered_grading_is_timed_again_once_and_replaced(world: World,
                                                               engine: Engine) -> None:
    short = int(world.submit(world.ada, REFERENCE).json()["id"])
    quiet = int(world.submit(world.bob, REFERENCE).json()["id"])
    _graded(world, short, median=1.2, lo=1.1, hi=1.3, credit="credited", interfered=True)
    _graded(world, quiet, median=1.2, lo=1.1, hi=1.3, credit="credited", interfered=False)
    assert _marks(world) == {"ada": (1.2, SHORT), "bob": (1.2, None)}
    before = {sid: len(_jobs(engine, sid)) for sid in (short, quiet)}

    for sid in (short, quiet):
        _finished_ago(engine, sid, 300)
    _sweep(world, after_s=600)  # not yet
    assert {sid: len(_jobs(engine, sid)) for sid in (short, quiet)} == before

    page = browser(world, "ada@uni.edu").get(f"/s/{short}").text
    at = datetime.now(UTC) + timedelta(seconds=300)  # graded 300 s ago, re-timed after 600 s
    assert ("The node was busy while you were timed: the platform will time it again by itself "
            "at about ") in page and "about 10 min after it was graded" in page
    assert any(f"at about {(at + timedelta(minutes=d)):%H:%M} UTC" in page for d in (-1, 0, 1))
    assert "time it again" not in browser(world, "bob@uni.edu").get(f"/s/{quiet}").text

    _sweep(world, after_s=60)
    assert _jobs(engine, short)[-1] == ("queued", retiming.RETIME_PRIORITY)
    assert len(_jobs(engine, quiet)) == before[quiet]  # a reliable figure is left alone
    got = world.get(world.ada, f"/api/submissions/{short}").json()
    assert got["status"] == "queued" and got["score"] is not None  # the marked grade stands meanwhile

    _graded(world, short, median=1.9, lo=1.8, hi=2.0, credit="credited", interfered=False)
    assert _marks(world) == {"ada": (1.9, None), "bob": (1.2, None)}
    _finished_ago(engine, short, 300)
    _sweep(world, after_s=60)  # timed again once: nothing more to do
    assert len(_jobs(engine, short)) == before[short] + 1

def test_a_node_that_stays_short_is_not_retimed_in_a_loop(world: World, engine: Engine) -> None:
    sid = int(world.submit(world.ada, REFERENCE).json()["id"])
    from server.db import session_factory

    with session_factory(engine)() as s:
        sub = s.get(Submission, sid)
        assert sub is not None
        sub.auto_retimes = retiming.MAX_AUTO_RETIMES  # timed again already, and short again
        s.commit()
    _graded(world, sid, credit="credited", interfered=True)
    _finished_ago(engine, sid, 300)
    jobs = len(_jobs(engine, sid))
    _sweep(world, after_s=60)
    assert len(_jobs(engine, sid)) == jobs
    assert _marks(world)["ada"][1] == SHORT


def test_retiming_off_queues_nothing(world: World, engine: Engine) -> None:
    sid = int(world.submit(world.ada, REFERENCE).json()["id"])
    _graded(world, sid, credit="credited", interfered=True)
    _finished_ago(engine, sid, 300)
    jobs = len(_jobs(engine, sid))
    _sweep(world, after_s=0)
    assert len(_jobs(engine, sid)) == jobs


def test_a_student_cannot_cancel_a_grading_the_course_started_again(world: World,
                                                                    engine: Engine) -> None:
    """Were a student able to cancel a regrade (the platform's or an instructor's), they would
    keep a grade the course meant to replace: staff only, and the previous grade stands."""
    sid = int(world.submit(world.ada, REFERENCE).json()["id"])
    _graded(world, sid, median=1.2, lo=1.1, hi=1.3, credit="credited", interfered=True)
    _finished_ago(engine, sid, 300)
    _sweep(world, after_s=60)
    r = world.post(world.ada, f"/api/submissions/{sid}/cancel")
    assert r.status_code == 403 and "graded again by the course" in r.json()["detail"]
    page = browser(world, "ada@uni.edu").get(f"/s/{sid}").text
    assert "Cancel this submission" not in page
    assert _jobs(engine, sid)[-1][0] == "queued"
    r = world.post(world.prof, f"/api/submissions/{sid}/cancel")
    assert r.status_code == 200, r.text
    got = world.get(world.ada, f"/api/submissions/{sid}").json()
    assert got["status"] == "graded" and got["score"] is not None
    assert _jobs(engine, sid)[-1][0] == "cancelled"
    assert _marks(world)["ada"] == (1.2, SHORT)
