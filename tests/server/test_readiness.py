"""An assignment students cannot submit to yet says why on the course page, on its own page and in
the API, and a submission to it is refused with the same words: waiting for a runner that serves
its queue, or being checked with an estimate of when it is ready (never a bare status word)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient
from sqlalchemy import Engine, select

from runners.protocol import PROTOCOL_VERSION
from server.db import session_factory
from server.models import AssignmentVersion, Job
from server.services.fleet import state as fleet
from server.services.fleet.readiness import about
from server.services.packages.assignments import read_folder
from tests.server.conftest import REFERENCE, REPO_ROOT, RUNNER, World, claim, finish_validation, zip_of
from tests.server.test_pages import browser, csrf

T2 = "/api/courses/th/assignments/t2-mpi"


def _hello(client: TestClient, name: str, queues: list[str]) -> None:
    """A runner serving `queues` says hello: from now on it is live."""
    r = client.post("/api/runner/hello", headers=RUNNER, json={
        "name": name, "queues": queues, "backend": "bwrap", "cores": 2, "memory_mb": 2048,
        "protocol_version": PROTOCOL_VERSION})
    assert r.status_code == 204, r.text


def _import(world: World, path: str) -> None:
    r = world.post(world.prof, "/api/courses/th/assignments/import", json={"path": path})
    assert r.status_code == 201, r.text


def _upload(world: World, files: dict[str, bytes]) -> None:
    r = world.post(world.prof, "/api/courses/th/assignments/upload",
                   files={"package": ("p.zip", zip_of(files))})
    assert r.status_code == 201, r.text


def _said(world: World, slug: str) -> str | None:
    """What the API tells a student of the assignment's readiness."""
    listed = {a["slug"]: a for a in world.get(world.ada, "/api/courses/th/assignments").json()}
    one = world.get(world.ada, f"/api/courses/th/assignments/{slug}").json()
    assert listed[slug]["readiness"] == one["readiness"]
    return str(one["readiness"]) if one["readiness"] is not None else None


def _pages_say(world: World, slug: str, words: str) -> None:
    """The course page (a student's home), the assignment's page and a submission through the
    page all say `words`; the page shows no status word."""
    b = browser(world)
    home = b.get("/").text
    assert f'<span class="badge not-open">{words}</span>' in home
    page = b.get(f"/c/th/{slug}").text
    assert f"Not open for submissions yet: {words}." in page
    assert ">validating<" not in home + page and "(validating)" not in page
    r = b.post(f"/c/th/{slug}/submit", data={"csrf_token": csrf(page)},
               files={"files": ("solution.py", REFERENCE)})
    assert r.status_code == 409 and f"not open for submissions yet: {words}" in r.text


def test_a_gpu_task_waits_for_a_gpu_runner_then_is_being_checked(world: World,
                                                                engine: Engine) -> None:
    with session_factory(engine)() as s:  # two-node tasks say what their runner must hold
        assert fleet.waiting_for(session=s, queue="mpinodes", live_s=45).startswith(  # type: ignore[union-attr]
            "waiting for a runner that holds two nodes or more")
    _import(world, "treasure-hunt/t3-cuda")
    assert _said(world, "t3-cuda") == "waiting for a GPU runner"  # no runner serves gpu
    _pages_say(world, "t3-cuda", "waiting for a GPU runner")
    r = world.submit(world.ada, b"x = 1\n", slug="t3-cuda")
    assert (r.status_code, r.json()["detail"]) == (
        409, "not open for submissions yet: waiting for a GPU runner")
    _hello(world.client, "cpu-node", ["cpu", "mpi"])  # not one that can check it
    assert _said(world, "t3-cuda") == "waiting for a GPU runner"

    _hello(world.client, "gpu-node", ["gpu"])
    # Nothing has been measured on this server: a first validation's typical length.
    assert _said(world, "t3-cuda") == "being checked, ready in about 15 s"
    _pages_say(world, "t3-cuda", "being checked, ready in about 15 s")
    assert _said(world, "t1-multiprocessing") is None  # ready: nothing to say
    finish_validation(world.client)
    assert _said(world, "t3-cuda") is None
    assert world.submit(world.ada, b"x = 1\n", slug="t3-cuda").status_code == 201  # open now


def _measured(engine: Engine, job_id: int, seconds: float, *, ago: float = 0) -> None:
    """The job ran `seconds` and finished `ago` seconds ago (as a runner's timing would leave it)."""
    with session_factory(engine)() as s, s.begin():
        job = s.get(Job, job_id)
        assert job is not None
        end = datetime.now(UTC) - timedelta(seconds=ago)
        job.claimed_at, job.finished_at = end - timedelta(seconds=seconds), end


def test_a_package_being_checked_says_when_it_is_ready(world: World, engine: Engine) -> None:
    _hello(world.client, "mpi-node", ["mpi"])
    _import(world, "treasure-hunt/t2-mpi")
    first = finish_validation(world.client, ok=False)  # its checks failed, after 40 s
    _measured(engine, first["job_id"], 40)
    failed = "its package failed its checks; your instructors can see why"
    assert _said(world, "t2-mpi") == failed
    assert world.submit(world.ada, REFERENCE, slug="t2-mpi").json()["detail"] == (
        f"not open for submissions yet: {failed}")

    files = read_folder(REPO_ROOT / "assignments/treasure-hunt/t2-mpi")
    files["statement.md"] += b"\nThe fixed package.\n"
    _upload(world, files)
    # The earlier validation of this package took 40 s: this one is expected to take as long.
    assert _said(world, "t2-mpi") == "being checked, ready in about 40 s"
    _pages_say(world, "t2-mpi", "being checked, ready in about 40 s")
    r = world.submit(world.ada, REFERENCE, slug="t2-mpi")
    assert (r.status_code, r.json()["detail"]) == (
        409, "not open for submissions yet: being checked, ready in about 40 s")
    assert world.get(world.prof, T2).json()["readiness"] == "being checked, ready in about 40 s"

    offer = claim(world.client, ("mpi",))  # the runner took it 12 s ago: 28 s to go
    assert offer is not None and offer["validate_job"] is not None
    with session_factory(engine)() as s, s.begin():
        job = s.get(Job, offer["job_id"])
        assert job is not None
        job.claimed_at = datetime.now(UTC) - timedelta(seconds=12)
    assert _said(world, "t2-mpi") == "being checked, ready in about 30 s"
    with session_factory(engine)() as s, s.begin():
        job = s.get(Job, offer["job_id"])
        assert job is not None
        job.claimed_at = datetime.now(UTC) - timedelta(seconds=68)
    # 28 s past the 40 s expected: wrong by at least that much, so as long again (not "5 s"
    # for as long as it runs).
    assert _said(world, "t2-mpi") == "being checked, ready in about 30 s"


def test_a_validation_behind_others_waits_for_them(world: World, engine: Engine) -> None:
    with session_factory(engine)() as s:  # t1's validation (the world's) took 70 s
        t1 = s.scalar(select(Job.id).join(AssignmentVersion, AssignmentVersion.id ==
                                            Job.version_id).where(Job.state == "done"))
    assert t1 is not None
    _measured(engine, t1, 70, ago=60)
    _hello(world.client, "cpu-node", ["cpu"])
    _import(world, "treasure-hunt/t5-ddp")
    _import(world, "parallel-python/dask")
    # Neither was checked before: the queue's typical validation (70 s), the second one behind
    # the first.
    assert (_said(world, "t5-ddp"), _said(world, "dask")) == (
        "being checked, ready in about 70 s", "being checked, ready in about 3 min")
    _hello(world.client, "cpu-node-2", ["cpu", "mpi"])  # two runners share what is ahead
    assert (_said(world, "t5-ddp"), _said(world, "dask")) == (
        "being checked, ready in about 70 s", "being checked, ready in about 105 s")

    offer = claim(world.client, ("cpu",))  # t5-ddp's check, 98 s ago: 28 s past its 70 s
    assert offer is not None and offer["validate_job"] is not None
    with session_factory(engine)() as s, s.begin():
        job = s.get(Job, offer["job_id"])
        assert job is not None
        job.claimed_at = datetime.now(UTC) - timedelta(seconds=98)
    # dask waits for what is left of it (28 s, shared by the two runners), then its own 70 s.
    assert (_said(world, "t5-ddp"), _said(world, "dask")) == (
        "being checked, ready in about 30 s", "being checked, ready in about 85 s")
    # t5-ddp runs on, 80 s past its 70 s: counted afresh, dask would now be 110 s away; what
    # its readers were told only shrinks while that moment lies ahead.
    with session_factory(engine)() as s, s.begin():
        job = s.get(Job, offer["job_id"])
        assert job is not None
        job.claimed_at = datetime.now(UTC) - timedelta(seconds=150)
    from server.services.fleet import readiness

    with session_factory(engine)() as s:
        dask = s.scalars(select(Job).where(Job.state == "queued", Job.kind == "validate")).one()
        assert readiness.seconds_to_ready(session=s, job=dask, live_s=600) > 105
    assert _said(world, "dask") == "being checked, ready in about 85 s"


def test_a_package_checked_in_another_course_is_expected_to_take_as_long(
        world: World, engine: Engine) -> None:
    """A second section (or the next term) imports a package this server has checked before: its
    estimate is that package's own check, not the queue's typical one."""
    with session_factory(engine)() as s:  # t1's validation (the world's) took 12 s
        t1 = s.scalar(select(Job.id).where(Job.kind == "validate", Job.state == "done"))
    assert t1 is not None
    _measured(engine, t1, 12, ago=60)
    _hello(world.client, "cpu-node", ["cpu"])
    _import(world, "parallel-python/dask")
    dask = finish_validation(world.client)  # 90 s: the queue's typical check is now 51 s
    _measured(engine, dask["job_id"], 90, ago=30)
    r = world.post(world.prof, "/api/courses", json={"slug": "next", "title": "Next term"})
    assert r.status_code == 201, r.text
    for path in ("treasure-hunt/t1-multiprocessing", "treasure-hunt/t5-ddp"):
        r = world.post(world.prof, "/api/courses/next/assignments/import", json={"path": path})
        assert r.status_code == 201, r.text
    said = {slug: world.get(world.prof, f"/api/courses/next/assignments/{slug}").json()
            ["readiness"] for slug in ("t1-multiprocessing", "t5-ddp")}
    # t1 as long as its own check (12 s); t5, never checked here, the queue's median (51 s)
    # after t1's 12 s ahead of it.
    assert said == {"t1-multiprocessing": "being checked, ready in about 15 s",
                    "t5-ddp": "being checked, ready in about 65 s"}


def test_a_check_waits_for_what_is_ahead_on_every_queue_its_runner_serves(
        world: World, engine: Engine) -> None:
    """One runner serving cpu and mpi takes the most urgent job of both: a cpu package's check
    queued behind an mpi package's waits for it too (measured on a first start: estimates half
    the time that was left, until the other queues' jobs counted)."""
    with session_factory(engine)() as s:  # t1's validation (the world's, cpu) took 20 s
        t1 = s.scalar(select(Job.id).where(Job.kind == "validate", Job.state == "done"))
    assert t1 is not None
    _measured(engine, t1, 20, ago=60)
    _hello(world.client, "node", ["cpu", "mpi"])
    _import(world, "treasure-hunt/t2-mpi")  # mpi, first of its queue: 15 s expected
    _import(world, "parallel-python/dask")  # cpu: 20 s, after t2's check
    assert (_said(world, "t2-mpi"), _said(world, "dask")) == (
        "being checked, ready in about 15 s", "being checked, ready in about 35 s")
    _hello(world.client, "cpu-only", ["cpu"])  # a second runner, for cpu alone, shares it
    assert _said(world, "dask") == "being checked, ready in about 30 s"


def test_estimates_are_rounded_up_and_never_promise_less_than_five_seconds() -> None:
    assert [about(s) for s in (0, 4.2, 5, 5.1, 41, 119, 120, 121, 600)] == [
        "about 5 s", "about 5 s", "about 5 s", "about 10 s", "about 45 s", "about 2 min",
        "about 2 min", "about 3 min", "about 10 min"]


def _queue_of(engine: Engine, slug: str) -> str:
    from server.models import Assignment

    with session_factory(engine)() as s:
        return str(s.scalar(select(Job.queue).join(
            AssignmentVersion, Job.version_id == AssignmentVersion.id).join(
            Assignment, AssignmentVersion.assignment_id == Assignment.id).where(
            Assignment.slug == slug).order_by(Job.id.desc()).limit(1)))


def _sweep(world: World) -> None:
    from server import reaper

    app = world.client.app
    reaper.sweep(app.state.sessions, app.state.dispatcher, lease_s=60,  # type: ignore[attr-defined]
                 max_attempts=3, grace_s=60, live_s=45)


def test_a_gpu_task_that_can_be_simulated_is_graded_where_no_gpu_runner_serves(
        world: World, engine: Engine) -> None:
    """t3 may be graded under the CUDA simulator (its statement says so), t4 may not: with only
    a simulating runner live, t3 moves to the gpusim queue and is checked, t4 keeps waiting for
    a GPU runner and says so. A GPU runner's hello takes t3 back to the gpu queue, and the
    simulating runner's stale message for it is refused, not served."""
    _import(world, "treasure-hunt/t3-cuda")
    _import(world, "treasure-hunt/t4-cuda-mpi")
    _hello(world.client, "laptop", ["cpu", "mpi", "gpusim"])
    assert _said(world, "t3-cuda") == "waiting for a GPU runner"  # until the reaper's pass
    _sweep(world)
    assert (_queue_of(engine, "t3-cuda"), _queue_of(engine, "t4-cuda-mpi")) == ("gpusim", "gpu")
    assert _said(world, "t3-cuda") == "being checked, ready in about 15 s"
    assert _said(world, "t4-cuda-mpi") == "waiting for a GPU runner"
    b = browser(world, "ada@uni.edu", "studentpass1")
    assert "numba's CUDA simulator, for correctness only" in b.get("/c/th/t3-cuda").text
    assert "No GPU runner is serving now" not in b.get("/c/th/t4-cuda-mpi").text
    # Its check done there, a student's submission goes straight to gpusim.
    offer = claim(world.client, ("gpusim",))
    assert offer is not None and offer["validate_job"]["assignment"] == "th/t3-cuda", offer
    r = world.client.post(f"/api/runner/jobs/{offer['job_id']}/result", headers={
        **RUNNER, "X-Job-Token": offer["token"]}, json={"checks": [
            {"name": "reference passes", "ok": True, "problems": []}]})
    assert r.status_code == 204, r.text
    r = world.submit(world.ada, b"x = 1\n", slug="t3-cuda")
    assert r.status_code == 201 and (r.json()["queue"], r.json()["waiting_for"]) == (
        "gpusim", None), r.json()
    stale = int(r.json()["id"])
    # A GPU runner comes: t3 waits for it again (a real GPU is preferred), t4 too.
    _hello(world.client, "gpu-node", ["gpu"])
    _sweep(world)
    assert world.get(world.ada, f"/api/submissions/{stale}").json()["queue"] == "gpu"
    assert _queue_of(engine, "t4-cuda-mpi") == "gpu"
    assert "No GPU runner is serving now" not in b.get("/c/th/t3-cuda").text
    job = _job_of_submission(engine, stale)
    r = world.client.post(f"/api/runner/jobs/{job}/claim", params={"runner": "laptop"},
                          headers=RUNNER)
    assert r.status_code == 403 and "does not serve the gpu queue" in r.json()["detail"], r.text


def _job_of_submission(engine: Engine, sid: int) -> int:
    with session_factory(engine)() as s:
        return int(s.scalar(select(Job.id).where(Job.submission_id == sid)) or 0)


def test_a_students_submission_goes_before_a_check_on_another_of_the_runners_queues(
        world: World, engine: Engine) -> None:
    """The local runner of a first start serves several queues: whichever queue's message it
    gets, a student's first submission goes before a package check (here t2's, on `mpi`)."""
    _import(world, "treasure-hunt/t2-mpi")
    with session_factory(engine)() as s:
        check = s.scalar(select(Job.id).where(Job.kind == "validate", Job.state == "queued"))
    assert check is not None
    sid = world.submit(world.ada, REFERENCE).json()["id"]  # t1, on `cpu`

    def claim_by_message(job_id: int, runner: str) -> dict:  # type: ignore[type-arg]
        r = world.client.post(f"/api/runner/jobs/{job_id}/claim", params={"runner": runner},
                              headers=RUNNER)
        assert r.status_code == 200, r.text
        return dict(r.json())

    _hello(world.client, "both", ["cpu", "mpi"])
    offer = claim_by_message(check, "both")  # the check's message, on `mpi`
    assert offer["job"] is not None and offer["job"]["submission_id"] == sid, offer
    with session_factory(engine)() as s:
        assert s.get(Job, check).state == "queued"  # type: ignore[union-attr]
    # A runner that has not said which queues it serves takes only the message's own queue.
    world.submit(world.bob, REFERENCE)
    offer = claim_by_message(check, "unannounced")
    assert offer["validate_job"] is not None and offer["job_id"] == check, offer


def test_an_instructors_own_package_is_checked_before_the_shipped_courses(
        world: World, engine: Engine) -> None:
    """The shipped courses' checks, queued as the server starts, wait behind a package an
    instructor imports: its estimate counts none of them, and a runner takes it first."""
    from server.models import Course, User
    from server.services.packages import assignments as assignment_service

    with session_factory(engine)() as s:  # t1's validation (the world's) took 20 s
        t1 = s.scalar(select(Job.id).where(Job.kind == "validate", Job.state == "done"))
    assert t1 is not None
    _measured(engine, t1, 20, ago=60)
    _hello(world.client, "cpu-node", ["cpu", "mpi"])
    artifacts_root = world.client.app.state.settings.artifacts_dir
    with session_factory(engine)() as s, s.begin():
        prof = s.scalars(select(User).where(User.is_instructor.is_(True))).one()
        course = s.scalars(select(Course)).one()
        for path in ("treasure-hunt/t5-ddp", "parallel-python/dask"):  # as a start imports them
            assignment_service.import_files(
                session=s, actor=prof, course=course, role="instructor", shipped=True,
                files=read_folder(REPO_ROOT / "assignments" / path), artifacts_root=artifacts_root)
    mine = read_folder(REPO_ROOT / "assignments/treasure-hunt/t2-mpi")
    _upload(world, mine)
    # Its own check alone (no mpi check finished yet: the first one's 15 s); dask waits behind
    # it and t5-ddp (15 s + 20 s), then runs its own 20 s.
    assert _said(world, "t2-mpi") == "being checked, ready in about 15 s"
    assert _said(world, "dask") == "being checked, ready in about 55 s"
    offer = claim(world.client, ("cpu", "mpi"))
    assert offer is not None and offer["validate_job"]["assignment"] == "th/t2-mpi"
