"""A package's version never changes under graded students (SQLite and PostgreSQL): other files
under a number someone was graded under are refused, or imported as the next number with the
instructor's consent; and a broken manifest is told whole in one round."""

from __future__ import annotations

import io
import tomllib
import zipfile

from sqlalchemy import Engine, func, select

from server.db import session_factory
from server.models import AssignmentVersion, Submission
from tests.server.conftest import REFERENCE, REPO_ROOT, World, claim, finish_validation, zip_of
from tests.server.test_pages import browser, csrf

T1 = REPO_ROOT / "assignments/treasure-hunt/t1-multiprocessing"
URL = "/api/courses/th/assignments/t1-multiprocessing"


def t1_files(changed_test: bool = True) -> dict[str, bytes]:
    files = {p.relative_to(T1).as_posix(): p.read_bytes() for p in T1.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    if changed_test:  # the same version number, other hidden tests
        files["hidden/test_hidden.py"] += b"\n\ndef test_one_more(submission):\n    assert True\n"
    return files


def versions(engine: Engine) -> list[tuple[str, str]]:
    with session_factory(engine)() as s:
        return [(v.version, v.bundle_sha256) for v in s.scalars(
            select(AssignmentVersion).order_by(AssignmentVersion.id))]


def stored_manifest(world: World, sha: str) -> dict[str, object]:
    from server.services.records import artifacts

    path = artifacts.path_of(world.client.app.state.settings.artifacts_dir, sha)
    with zipfile.ZipFile(io.BytesIO(path.read_bytes())) as zf:
        return tomllib.loads(zf.read("assignment.toml").decode())


def test_other_files_under_a_graded_version_are_refused_or_renumbered(
        world: World, engine: Engine) -> None:
    version = world.get(world.prof, URL).json()["version"]
    # Before anyone is graded a fix may keep its number (the candidate replaces nothing stored).
    assert world.submit(world.ada, REFERENCE).status_code == 201
    before = versions(engine)
    r = world.post(world.prof, "/api/courses/th/assignments/upload",
                   files={"package": ("p.zip", zip_of(t1_files()))})
    assert r.status_code == 409, r.text
    parts = version.split(".")
    following = ".".join([*parts[:-1], str(int(parts[-1]) + 1)])
    said = r.json()["detail"]
    assert f"version {version} of t1-multiprocessing has other files" in said
    assert "1 submission was graded under it: nothing was imported" in said
    assert f'Set version = "{following}"' in said
    assert versions(engine) == before
    # With consent: the next free number, written into the stored package's manifest too.
    r = world.client.post("/api/courses/th/assignments/upload", headers=world.prof,
                          params={"next_version": "true"},
                          files={"package": ("p.zip", zip_of(t1_files()))})
    assert r.status_code == 201, r.text
    assert r.json()["candidate"]["version"] == following
    after = versions(engine)
    assert after[:-1] == before and after[-1][0] == following
    assert stored_manifest(world, after[-1][1])["version"] == following
    assert claim(world.client)["job"]["assignment_version"] == version  # ada's grading, first
    finish_validation(world.client)
    assert world.get(world.ada, URL).json()["version"] == following
    with session_factory(engine)() as s:
        graded = s.scalars(select(Submission)).one()
        assert graded.version.version == version  # the grade keeps the version it was made under
    # The same files again are the version they were imported as: nothing new.
    r = world.client.post("/api/courses/th/assignments/upload", headers=world.prof,
                          params={"next_version": "true"},
                          files={"package": ("p.zip", zip_of(t1_files()))})
    assert r.status_code == 201 and r.json()["version"] == following, r.text
    assert versions(engine) == after


def test_the_course_page_refuses_and_renumbers_alike(world: World, engine: Engine) -> None:
    assert world.submit(world.ada, REFERENCE).status_code == 201
    b = browser(world, "prof@uni.edu", "prof-pass-4821")
    before = versions(engine)
    page = b.get("/c/th").text
    r = b.post("/c/th/import", data={"csrf_token": csrf(page)},
               files={"package": ("p.zip", zip_of(t1_files()), "application/zip")})
    assert r.status_code == 409 and "has other files" in r.text and "import it as" in r.text
    assert versions(engine) == before
    r = b.post("/c/th/import", data={"csrf_token": csrf(page), "next_version": "true"},
               files={"package": ("p.zip", zip_of(t1_files()), "application/zip")})
    assert r.status_code == 303, r.text
    assert len(versions(engine)) == len(before) + 1


def test_a_broken_manifest_is_told_whole_with_did_you_mean(world: World, engine: Engine) -> None:
    files = t1_files(changed_test=False)
    files["assignment.toml"] = files["assignment.toml"].replace(b"wall_seconds", b"wall_secnds")
    files = {n: c for n, c in files.items() if not n.startswith("baseline/")}
    with session_factory(engine)() as s:
        count = s.scalar(select(func.count()).select_from(AssignmentVersion))
    r = world.post(world.prof, "/api/courses/th/assignments/upload",
                   files={"package": ("p.zip", zip_of(files))})
    assert r.status_code == 422, r.text
    problems = {(p["file"], p["key"], p["reason"]) for p in r.json()["problems"]}
    assert problems == {
        ("assignment.toml", "resources.wall_secnds", "unknown key: did you mean 'wall_seconds'?"),
        ("baseline/solution.py", "files.baseline", "missing from the package")}
    with session_factory(engine)() as s:
        assert s.scalar(select(func.count()).select_from(AssignmentVersion)) == count
