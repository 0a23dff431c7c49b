"""Both shipped courses reach the server: the first instructor's account imports them all, and
(marked `full`, run by scripts/course-check.sh) every reference a CPU runner can grade is graded
and ranked on its leaderboard."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from runners import package
from server.cli import import_shipped_courses
from server.db import make_engine, session_factory
from server.models import Assignment, Course
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
    assert len(packages("parallel-python")) == 6


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
        # A CPU-only runner that also serves the gpu queue: it grades t3 under the CUDA
        # simulator (correctness only); t4 needs a real GPU and is left out.
        p.start_runner("cpu-1", "cpu,mpi,gpu", env={"PARAGRADE_GPU_MODE": "simulated"})
        todo = [(c, a) for c in COURSES for a in packages(c)
                if a.manifest.resources.kind != "gpu" or a.manifest.resources.simulate_gpu]
        for course, a in todo:
            url = f"/api/courses/{course}/assignments/{a.manifest.slug}"
            wait_until(f"{course}/{a.manifest.slug} to validate", lambda url=url: p.get(
                p.prof, url)["validation"] in ("ready", "failed"), 900, 1)
            assert p.get(p.prof, url)["validation"] == "ready", a.ref
        sent = {}
        for course, a in todo:
            code = (a.folder("reference") / a.manifest.entry.file).read_bytes()
            sent[(course, a.manifest.slug)] = p.submit(ada, a.manifest.slug, code, course)
        results = {}
        for (course, slug), sid in sent.items():
            results[slug] = wait_until(f"{course}/{slug}'s grade", lambda sid=sid: (
                lambda s: s if s["status"] not in ("queued", "running") else None)(
                p.get(ada, f"/api/submissions/{sid}")), 900, 1)
            board = p.get(ada, f"/api/courses/{course}/assignments/{slug}/leaderboard")
            # (in the course she joined too, her alias is the one she registered with)
            assert [(e["alias"], e["rank"], e["submission_id"]) for e in board] == [
                ("ada", 1, sid)], (slug, (results[slug]["report"] or {}).get("summary"))
        summary = {slug: (s["verdict"], s["score"], (s["report"]["speedup"] or {}).get("median"))
                   for slug, s in results.items()}
        print("\n".join(f"{k}: {v}" for k, v in summary.items()))
        assert all(v[0] == "passed" for v in summary.values()), summary
    finally:
        p.close()
