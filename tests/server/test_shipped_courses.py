"""Both shipped courses reach the server: the first instructor's account imports them all, each
course's first task validated first, and (marked `full`, run by scripts/course-check.sh) every
reference a CPU runner can grade is graded and ranked on its leaderboard."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from runners import package
from runners.protocol import SpeedupFigure, timed_on_a_busy_node
from server.cli import import_shipped_courses
from server.db import make_engine, session_factory
from server.models import Assignment, AssignmentVersion, Course, Job
from server.services.packages.shipped import ShippedCourse, find, round_order, validation_cost
from server.settings import REPO_ROOT
from tests.server.live import Platform, wait_until

SHIPPED = REPO_ROOT / "assignments"
COURSES = {"treasure-hunt": "Treasure hunt: parallel Python",
           "parallel-python": "Parallel Python: numba, threads, dask, joblib, job arrays, "
                              "scaling studies"}


def packages(course: str) -> list[package.Assignment]:
    return [package.load(m.parent) for m in sorted((SHIPPED / course).glob("*/assignment.toml"))]


def test_the_first_instructor_gets_every_shipped_course(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'paragrade.db'}"
    env = {**os.environ, "PARAGRADE_SERVER_DATABASE_URL": db,
           "PARAGRADE_SERVER_ARTIFACTS_DIR": str(tmp_path / "artifacts"),
           "PARAGRADE_SERVER_BROKER_URL": f"sqla+sqlite:///{tmp_path / 'broker.sqlite'}"}
    r = subprocess.run([sys.executable, "-m", "paragrade.cli", "admin", "create-instructor",
                        "prof@uni.edu", "--password", "prof-pass-4821"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    for slug in COURSES:
        assert f"course {slug}: join code" in " ".join(r.stdout.split()), r.stdout
    with session_factory(make_engine(db))() as s:
        courses = {c.slug: c for c in s.scalars(select(Course))}
        assert {slug: c.title for slug, c in courses.items()} == COURSES
        for slug, course in courses.items():
            stored = set(s.scalars(select(Assignment.slug).where(
                Assignment.course_id == course.id)))
            assert stored == {a.manifest.slug for a in packages(slug)}
        # Validations are published in the order they were queued: each course's packages in
        # their order, the treasure hunt's t1 (the cheapest first task) before everything else.
        queued = [f"{c}/{a}" for c, a in s.execute(
            select(Course.slug, Assignment.slug)
            .join(Assignment, Assignment.course_id == Course.id)
            .join(AssignmentVersion, AssignmentVersion.assignment_id == Assignment.id)
            .join(Job, Job.version_id == AssignmentVersion.id).order_by(Job.id))]
    assert queued[:2] == ["treasure-hunt/t1-multiprocessing", "parallel-python/dask"]
    for course in COURSES:
        mine = [q.split("/")[1] for q in queued if q.startswith(f"{course}/")]
        assert mine == [a.manifest.slug for a in packages(course)]
    assert len(packages("parallel-python")) == 6


def test_packages_are_validated_round_by_round_cheapest_first() -> None:
    a = ShippedCourse("a", "A", [Path("a1"), Path("a2"), Path("a3")])
    b = ShippedCourse("b", "B", [Path("b1"), Path("b2")])
    cost = {"a1": (0, 2), "a2": (0, 0), "a3": (1, 0), "b1": (0, 1), "b2": (0, 0)}
    order = round_order([a, b], cost=lambda p: cost[p.name])
    assert [p.name for _, p in order] == ["b1", "a1", "a2", "b2", "a3"]  # ties: course order
    courses, problems = find(SHIPPED)
    assert problems == [] and [c.slug for c in courses] == ["parallel-python", "treasure-hunt"]
    cost_of = {p.name: validation_cost(p) for c in courses for p in c.packages}
    # t1 needs only NumPy and the standard library; dask's import costs every run a second.
    assert cost_of["t1-multiprocessing"] < cost_of["dask"] < cost_of["t2-mpi"]
    assert cost_of["t3-cuda"][0] == cost_of["t4-cuda-mpi"][0] == 1  # a CPU runner leaves them
    assert cost_of["t2-cluster"][0] == 1  # two nodes: among the last


@pytest.mark.full
@pytest.mark.timeout(1800)
def test_every_shipped_reference_is_graded_and_ranked(tmp_path: Path) -> None:
    p = Platform(tmp_path, f"sqla+sqlite:///{tmp_path / 'broker.sqlite'}")
    try:
        imported = import_shipped_courses(p.settings)
        assert len(imported) == sum(len(packages(c)) for c in COURSES)
        codes = {c["slug"]: c["join_code"] for c in p.get(p.prof, "/api/courses")}
        ada = p.student("ada", codes["treasure-hunt"])
        r = p.http.post("/api/courses/join", json={"join_code": codes["parallel-python"]},
                        headers=ada)
        assert r.status_code == 200, r.text
        # A CPU-only runner as the one-command start runs it: it grades t3 under the CUDA
        # simulator (correctness only, the gpusim queue) and t2-cluster on two stand-in nodes;
        # t4 needs a real GPU and is left out.
        p.start_runner("cpu-1", "cpu,mpi,gpusim,mpinodes", env={"PARAGRADE_STANDIN_NODES": "2"})
        todo = [(c, a) for c in COURSES for a in packages(c)
                if a.manifest.resources.kind != "gpu" or a.manifest.resources.simulate_gpu]
        for course, a in todo:
            url = f"/api/courses/{course}/assignments/{a.manifest.slug}"
            wait_until(f"{course}/{a.manifest.slug} to validate", lambda url=url: p.get(
                p.prof, url)["validation"] in ("ready", "failed"), 900, 1)
            assert p.get(p.prof, url)["validation"] == "ready", a.ref
        sent = {}
        for course, a in todo:
            sent[(course, a.manifest.slug)] = p.submit(ada, a.manifest.slug,
                                                       package.code_of(a, "reference"), course)
        results = {}
        for (course, slug), sid in sent.items():
            results[slug] = wait_until(f"{course}/{slug}'s grade", lambda sid=sid: (
                lambda s: s if s["status"] not in ("queued", "running") else None)(
                p.get(ada, f"/api/submissions/{sid}")), 900, 1)
            board = p.get(ada, f"/api/courses/{course}/assignments/{slug}/leaderboard")
            # (in the course she joined too, her alias is the one she registered with; a figure
            # timed on a busy node waits, unranked, as the report's own interference says)
            speedup = (results[slug]["report"] or {}).get("speedup")
            busy = speedup is not None and timed_on_a_busy_node(
                SpeedupFigure.model_validate(speedup))
            assert [(e["alias"], e["rank"], e["submission_id"]) for e in board] == [
                ("ada", None if busy else 1, sid)], (slug, (results[slug]["report"] or {}).get(
                    "summary"))
        summary = {slug: (s["verdict"], s["score"], (s["report"]["speedup"] or {}).get("median"))
                   for slug, s in results.items()}
        print("\n".join(f"{k}: {v}" for k, v in summary.items()))
        assert all(v[0] == "passed" for v in summary.values()), summary
        _practised_on_every_kind(p, ada, results)
    finally:
        p.close()


PRACTISED = {"t1-multiprocessing": "cpu", "t2-mpi": "mpi", "t2-cluster": "mpinodes",
             "t3-cuda": "gpusim"}


def _practised_on_every_kind(p: Platform, ada: dict[str, str], graded: dict[str, Any]) -> None:
    """A practice run with a profile of each runner kind's reference, through the server: the
    report says practice, each kind's profile shows its workers (two nodes' ranks apart, the
    simulator's GPU time said so), and no board or grade moved."""
    base = "/api/courses/treasure-hunt/assignments"
    boards = {s: p.get(ada, f"{base}/{s}/leaderboard") for s in PRACTISED}
    runs = {}
    for slug in PRACTISED:
        a = package.load(SHIPPED / "treasure-hunt" / slug)
        files = [("files", item) for item in package.code_of(a, "reference").items()]
        r = p.http.post(f"{base}/{slug}/practice", files=files, data={"profile": "true"},
                        headers=ada)
        assert r.status_code == 201, r.text
        runs[slug] = r.json()["id"]
    for slug, run_id in runs.items():
        run = wait_until(f"{slug}'s practice run", lambda i=run_id: (
            lambda r: r if r["status"] in ("done", "error") else None)(
            p.get(ada, f"/api/practice/{i}")), 600, 1)
        report = run["report"]
        assert run["status"] == "done" and report["practice"], (slug, run)
        assert report["summary"].startswith("Practice: not graded"), report["summary"]
        prof = report["profile"]
        assert prof and prof["processes"] and prof["note"] is None, (slug, prof)
        if slug == "t2-cluster":
            assert {w["node"] for w in prof["processes"]} == {"n1", "n2"}, prof["processes"]
        if slug == "t3-cuda":
            assert prof["gpu"]["simulated"] and prof["gpu"]["per_kernel"], prof["gpu"]
        print(f"{slug} ({PRACTISED[slug]}): {[w['label'] for w in prof['processes']]}, "
              f"profile {prof['cost_s']} s")
    for slug, board in boards.items():
        assert p.get(ada, f"{base}/{slug}/leaderboard") == board, slug
        sub = p.get(ada, f"/api/submissions/{graded[slug]['id']}")
        assert sub["score"] == graded[slug]["score"], slug


def test_the_password_prompt_asks_twice_and_says_why_it_asks_again(tmp_path: Path) -> None:
    env = {**os.environ, "PARAGRADE_SERVER_DATABASE_URL": f"sqlite:///{tmp_path / 'p.db'}",
           "PARAGRADE_SERVER_ARTIFACTS_DIR": str(tmp_path / "artifacts"),
           "PARAGRADE_SERVER_BROKER_URL": f"sqla+sqlite:///{tmp_path / 'broker.sqlite'}"}
    typed = "orchid-lantern-41\norchid-lantern-42\norchid-lantern-41\norchid-lantern-41\n"
    r = subprocess.run([sys.executable, "-m", "paragrade.cli", "admin", "create-instructor",
                        "prof@uni.edu"], env=env, input=typed, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    said = r.stdout + r.stderr
    assert said.count("the same password again") == 2 and "do not match" in said, said
    assert "instructor prof@uni.edu created" in " ".join(said.split())
    short = subprocess.run([sys.executable, "-m", "paragrade.cli", "admin", "create-instructor",
                            "ta@uni.edu"], env=env, input="short\nshort\n", capture_output=True,
                           text=True, timeout=300)
    assert short.returncode == 2 and "at least 8 characters" in short.stdout + short.stderr
