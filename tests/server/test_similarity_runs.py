"""A similarity run end to end: the instructor starts it over the API, a runner (the real
worker code, playing against this server) compares the submissions with copydetect, and the
pairs come back ranked, with a side-by-side page; only the course's staff reach any of it."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy import Engine

from runners.fleet.claimed import post_outcome
from runners.fleet.runner import BundleCache, handle
from runners.protocol import JobOffer
from runners.settings import RunnerSettings
from server.db import session_factory
from server.services.people import users
from tests.server.conftest import RUNNER, World, claim, login
from tests.server.test_pages import browser, csrf
from tests.similarity_corpus import disguise, honest

T1 = "/api/courses/th/assignments/t1-multiprocessing"


def _students(world: World, engine: Engine, n: int) -> list[dict[str, str]]:
    with session_factory(engine)() as s, s.begin():
        for i in range(n):
            users.create(session=s, email=f"s{i}@uni.edu", name=f"S{i}", password="studentpass1")
    out = []
    for i in range(n):
        who = login(world.client, f"s{i}@uni.edu", "studentpass1")
        r = world.post(who, "/api/courses/join", json={"join_code": world.join_code})
        assert r.status_code == 200, r.text
        out.append(who)
    return out


def _run_on_a_runner(world: World, tmp_path: Path) -> str:
    """Claim the similarity job and do what a runner does with it (fetch, compare, post)."""
    offer = JobOffer.model_validate(claim(world.client, ("cpu",)))
    assert offer.similarity_job is not None
    with TestClient(world.client.app, headers=RUNNER) as runner:
        outcome = handle(offer, runner, BundleCache(tmp_path / "bundles"),
                         RunnerSettings(backend="process", scratch_dir=tmp_path))
        assert outcome.similarity is not None, outcome.platform_error
        assert post_outcome(runner, offer, outcome)
    return str(offer.similarity_job.assignment)


def test_a_near_copy_among_fifty_is_flagged_and_the_honest_rest_is_not(
        world: World, engine: Engine, tmp_path: Path) -> None:
    sources = honest()  # 49 independently written modules
    sources.append(disguise(sources[7]))  # the 50th copies the 8th, disguised
    who = [world.ada, world.bob, *_students(world, engine, 48)]
    ids = []
    for student, source in zip(who, sources, strict=True):
        r = world.submit(student, source.encode())
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    r = world.post(world.prof, f"{T1}/similarity", json={"basis": "latest", "threshold": 0.5})
    assert r.status_code == 202, r.text
    run = r.json()
    assert (run["status"], run["submissions"]) == ("queued", 50)
    # The grading jobs are not this test's: only the similarity job is claimed.
    from server.models import Job
    with world.client.app.state.sessions() as s:  # type: ignore[attr-defined]
        for job in s.query(Job).filter(Job.kind == "grade"):
            job.state = "cancelled"
        s.commit()
    assert _run_on_a_runner(world, tmp_path) == "th/t1-multiprocessing"
    done = world.get(world.prof, f"{T1}/similarity/{run['id']}").json()
    assert done["status"] == "done" and done["tool"].startswith("copydetect")
    pairs = [(p["a"], p["b"]) for p in done["pairs"]]
    assert pairs == [(ids[7], ids[49])]
    pair = done["pairs"][0]
    assert (pair["student_a"], pair["student_b"]) == ("s5@uni.edu", "s47@uni.edu")
    assert min(pair["share_a"], pair["share_b"]) > 0.8 and pair["lines_a"] and pair["lines_b"]
    listed = world.get(world.prof, f"{T1}/similarity").json()
    assert [(x["id"], x["status"], x["pairs"]) for x in listed] == [(run["id"], "done", None)]
    # The pages: the run's ranked pairs, then the pair side by side with its lines marked.
    b = browser(world, "prof@uni.edu", "prof-pass-4821")
    page = b.get(f"/c/th/t1-multiprocessing/similarity/{run['id']}")
    assert page.status_code == 200 and "Side by side" in page.text and "s47@uni.edu" in page.text
    side = b.get(f"/c/th/t1-multiprocessing/similarity/{run['id']}/1")
    assert side.status_code == 200 and side.text.count('class="match"') > 50
    assert b.get(f"/c/th/t1-multiprocessing/similarity/{run['id']}/2").status_code == 404


def test_only_staff_run_and_read_similarity(world: World, engine: Engine) -> None:
    for who in (world.ada, world.bob):
        assert world.submit(who, honest(2)[who is world.bob].encode()).status_code == 201
    assert world.post(world.ada, f"{T1}/similarity", json={}).status_code == 403
    r = world.post(world.prof, f"{T1}/similarity", json={})
    assert r.status_code == 202, r.text
    run_id = r.json()["id"]
    assert world.get(world.ada, f"{T1}/similarity").status_code == 403
    assert world.get(world.ada, f"{T1}/similarity/{run_id}").status_code == 403
    b = browser(world)
    assert b.get(f"/c/th/t1-multiprocessing/similarity/{run_id}").status_code == 403
    assert world.get(world.prof, f"{T1}/similarity/999999").status_code == 404


def test_a_run_needs_two_students_and_a_sane_threshold(world: World) -> None:
    r = world.post(world.prof, f"{T1}/similarity", json={})
    assert r.status_code == 422 and "at least two" in r.json()["detail"]
    assert world.submit(world.ada, honest(1)[0].encode()).status_code == 201
    for body in ({"threshold": 0}, {"threshold": 1.5}, {"basis": "worst"}):
        assert world.post(world.prof, f"{T1}/similarity", json=body).status_code == 422
    b = browser(world, "prof@uni.edu", "prof-pass-4821")
    page = b.get("/c/th/t1-multiprocessing/similarity")
    assert page.status_code == 200 and "Start a run" in page.text
    r = b.post("/c/th/t1-multiprocessing/similarity",
               data={"basis": "latest", "threshold": "0.5", "csrf_token": csrf(page.text)})
    assert r.status_code == 422 and "at least two" in r.text
