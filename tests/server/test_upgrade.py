"""Next release, this term's data: a database an earlier release made, with its artifacts, opens
after `migrate.upgrade` with everything it held, on SQLite and PostgreSQL; and the schema goes
back down to that release's keeping the rows. The fixtures (tests/fixtures/upgrade/term-*) were
made through each release's own API (make_term.py beside them) by the commit that brought its
schema: 0b6a290 (0013), e8a23dd (0014), 5b4f040 (0015), 5d20652 (0016), ed068ed (0017),
686cae1 (0018) and 439e562 (0019):
an instructor, course `th` with t1, ada (two graded submissions), bob (one graded, an extension),
dee (a held speedup the instructor granted), cy (one queued), a deadline, an LTI platform."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from alembic.script import ScriptDirectory
from fastapi.testclient import TestClient
from sqlalchemy import text

from server import backup, migrate
from server.db import make_engine
from server.main import create_app
from server.services.records.artifacts import path_of
from server.settings import ServerSettings
from tests.server.conftest import PG_ADMIN, PG_TEST_DB, REFERENCE, login

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "upgrade"
RELEASES = ("0013", "0014", "0015", "0016", "0017", "0018", "0019")
"""The schemas of the earlier releases whose terms are kept (tests/fixtures/upgrade/term-*),
one per migration step: 0013 the oldest kept, 0019 the newest before this one."""
A = "/api/courses/th/assignments/t1-multiprocessing"


@pytest.fixture(params=[(release, kind) for release in RELEASES
                        for kind in ("sqlite", "postgresql")], ids=lambda p: "-".join(p))
def term(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path, str]]:
    """An earlier release's term, copied into a database of its own: its URL, its artifacts and
    the release's schema."""
    release, kind = request.param
    if kind == "sqlite":
        shutil.copytree(FIXTURES / f"term-{release}", tmp_path / "term")
        yield (f"sqlite:///{tmp_path / 'term' / 'paragrade.db'}", tmp_path / "term" / "artifacts",
               release)
        return
    name = f"{PG_TEST_DB}_term"
    try:
        with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name}")
    except psycopg.Error:
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432")
    source = FIXTURES / f"term-{release}-postgresql"
    loaded = subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-U",
                             "postgres", "-d", name, "-f", str(source / "database.sql")],
                            capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0, loaded.stderr
    shutil.copytree(source / "artifacts", tmp_path / "artifacts")
    yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}", tmp_path / "artifacts", release
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _head() -> str:
    head = ScriptDirectory.from_config(migrate.config("sqlite://")).get_current_head()
    assert head is not None
    return head


def _students(url: str, artifacts: Path) -> list[tuple[str, str]]:
    """Each submission's student and status (in SQL any schema since 0013 answers), every
    archive in place."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text(
                "SELECT u.email, s.status, s.archive_sha256 FROM submissions s "
                "JOIN users u ON u.id = s.user_id ORDER BY s.id")).all()
    finally:
        engine.dispose()
    assert all(path_of(artifacts, sha).is_file() for _, _, sha in rows)
    return [(email, status) for email, status, _ in rows]


def test_an_earlier_releases_term_opens_with_its_data(term: tuple[str, Path, str],
                                                      settings: ServerSettings,
                                                      tmp_path: Path) -> None:
    url, artifacts, release = term
    migrate.upgrade(url)
    assert _students(url, artifacts) == [
        ("ada@uni.edu", "graded"), ("ada@uni.edu", "graded"), ("bob@uni.edu", "graded"),
        ("dee@uni.edu", "graded"), ("cy@uni.edu", "queued")]
    engine = make_engine(url)
    here = settings.model_copy(update={"artifacts_dir": artifacts})
    try:
        with TestClient(create_app(here, engine)) as c:
            ada = login(c, "ada@uni.edu", "studentpass1")  # passwords hashed then still verify
            mine = c.get("/api/submissions", headers=ada).json()
            assert [m["score"] for m in mine] == [90.0, 90.0]
            one = c.get(f"/api/submissions/{mine[-1]['id']}", headers=ada).json()
            assert one["report"]["speedup"]["median"] == 1.8
            board = c.get("/api/courses/th/assignments/t1-multiprocessing/leaderboard",
                          headers=ada).json()
            assert [(e["alias"], e["rank"]) for e in board] == [("dee", 1), ("ada", 2),
                                                                 ("bob", 3)]
            assert [e["speedup"] for e in board][1:] == [1.8, 1.3]
            prof = login(c, "prof@uni.edu", "prof-pass-4821")
            staff = c.get(f"{A}/submissions", headers=prof).json()
            assert [x["student"] for x in staff] == ["cy@uni.edu", "dee@uni.edu", "bob@uni.edu",
                                                     "ada@uni.edu", "ada@uni.edu"]
            assert staff[0]["status"] == "queued" and staff[0]["queue_position"] == 1
            reviews = c.get(f"{A}/reviews", headers=prof).json()
            assert [(r["alias"], r["credit"], r["review"]) for r in reviews] == [
                ("dee", "held", "granted")]
            extensions = c.get(f"{A}/extensions", headers=prof).json()
            assert [(x["email"], x["deadline"][:10], x["reason"]) for x in extensions] == [
                ("bob@uni.edu", "2027-01-27", "ill")]
            assert c.get(A, headers=prof).json()["deadline"].startswith("2027-01-20")
            platforms = c.get("/api/courses/th/lti/platforms", headers=prof).json()
            assert [p["issuer"] for p in platforms] == ["https://lms.uni.edu"]
            cy = login(c, "cy@uni.edu", "studentpass1")
            r = c.post(f"{A}/submissions", headers=cy,
                       files=[("files", ("solution.py", REFERENCE + b"\n# next term\n"))])
            assert r.status_code == 201, r.text
    finally:
        engine.dispose()
    # And this release's backup takes it whole.
    took = backup.backup(url=url, artifacts_dir=artifacts, dest=tmp_path / "bk")
    assert took.submissions == 6 and took.revision == _head()
    # Back down to the earlier release's schema (a rollback): its rows stay; what the later
    # migrations added (their columns and tables) goes with them. Then up again.
    if release >= "0014":  # its runner credential still opens the fleet to its runner
        engine = make_engine(url)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT name FROM runner_credentials")).scalars().all() == [
                "lab-node-1"]
        engine.dispose()
    migrate.downgrade(url, release)
    assert [who for who, _ in _students(url, artifacts)] == [
        "ada@uni.edu", "ada@uni.edu", "bob@uni.edu", "dee@uni.edu", "cy@uni.edu", "cy@uni.edu"]
    migrate.upgrade(url)
    assert len(_students(url, artifacts)) == 6
