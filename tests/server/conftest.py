"""Server fixtures: the app over SQLite or the real PostgreSQL, migrated by Alembic, clean per test."""

from __future__ import annotations

import contextlib
import io
import os
import sqlite3
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from pwdlib import PasswordHash
from pwdlib.hashers.argon2 import Argon2Hasher
from sqlalchemy import Engine, select, text

from server import migrate, security
from server.db import Base, make_engine
from server.main import create_app
from server.settings import REPO_ROOT as REPO_ROOT
from server.settings import ServerSettings

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
PG_TEST_DB = f"paragrade_test_{os.getpid()}"  # concurrent test runs never share a database


def _pg_url() -> str | None:
    try:
        with psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {PG_TEST_DB} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {PG_TEST_DB}")
    except psycopg.Error:
        return None
    return f"postgresql+psycopg://postgres@127.0.0.1:5432/{PG_TEST_DB}"


CHEAP_HASHER = PasswordHash((Argon2Hasher(time_cost=1, memory_cost=1024, parallelism=1),))
"""argon2id at its lowest cost: 1.5 ms a hash where the production cost takes 0.17 s, and a
`world` makes six. The same algorithm and code paths; the stored hashes verify anywhere."""


@pytest.fixture(autouse=True)
def cheap_password_hashes(request: pytest.FixtureRequest,
                          monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Server tests hash at argon2's lowest cost, except those marked real_password_hash (they
    check the production cost, or time a login)."""
    if request.node.get_closest_marker("real_password_hash"):
        yield
        return
    security._dummy_hash.cache_clear()  # the unknown-email check's hash: made at this cost
    monkeypatch.setattr(security, "_hasher", CHEAP_HASHER)
    yield
    security._dummy_hash.cache_clear()


@pytest.fixture(scope="session")
def pg_engine() -> Iterator[Engine | None]:
    url = _pg_url()
    if url is None:
        yield None
        return
    migrate.upgrade(url)
    engine = make_engine(url)
    yield engine
    engine.dispose()
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {PG_TEST_DB} WITH (FORCE)")


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database migrated once per test process: each test gets a copy of it (Alembic's
    run costs 0.32 s a database; tests/server/test_migrations.py runs the migrations themselves)."""
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    migrate.upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path,
           pg_engine: Engine | None) -> Iterator[Engine]:
    if request.param == "sqlite":
        db = tmp_path / "test.db"
        # SQLite's backup API: a consistent copy whatever is left in the template's WAL
        with contextlib.closing(sqlite3.connect(request.getfixturevalue("sqlite_template"))) as src, \
                contextlib.closing(sqlite3.connect(db)) as dst:
            src.backup(dst)
        e = make_engine(f"sqlite:///{db}")
        yield e
        e.dispose()
        return
    if pg_engine is None:
        pytest.skip("PostgreSQL is not reachable on 127.0.0.1:5432")
    yield pg_engine
    tables = ", ".join(t.name for t in Base.metadata.sorted_tables)
    with pg_engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))


@pytest.fixture
def settings(tmp_path: Path) -> ServerSettings:
    return ServerSettings(database_url="sqlite://", artifacts_dir=tmp_path / "artifacts",
                          assignments_dir=REPO_ROOT / "assignments", runner_token="runner-secret-1234",
                          broker_url="memory://",
                          max_upload_bytes=64 * 1024)


@pytest.fixture
def client(settings: ServerSettings, engine: Engine) -> Iterator[TestClient]:
    with TestClient(create_app(settings, engine)) as c:
        yield c


@dataclass
class World:
    """An instructor, a course with t1 imported, two students; their tokens."""

    client: TestClient
    prof: dict[str, str]
    ada: dict[str, str]
    bob: dict[str, str]
    join_code: str

    def post(self, who: dict[str, str], url: str, **kw: Any) -> Any:
        return self.client.post(url, headers=who, **kw)

    def get(self, who: dict[str, str], url: str, **kw: Any) -> Any:
        return self.client.get(url, headers=who, **kw)

    def submit(self, who: dict[str, str], content: bytes, name: str = "solution.py",
               slug: str = "t1-multiprocessing") -> Any:
        return self.post(who, f"/api/courses/th/assignments/{slug}/submissions",
                         files=[("files", (name, content))])


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def login(client: TestClient, email: str, password: str) -> dict[str, str]:
    r = client.post("/api/auth/token", json={"email": email, "password": password})
    assert r.status_code == 200, r.text
    return bearer(r.json()["token"])


@pytest.fixture
def world(client: TestClient, engine: Engine) -> World:
    from server.db import session_factory
    from server.services.people import users

    with session_factory(engine)() as s, s.begin():
        users.create(session=s, email="prof@uni.edu", name="Prof", password="prof-pass-4821",
                     is_instructor=True)
    prof = login(client, "prof@uni.edu", "prof-pass-4821")
    r = client.post("/api/courses", json={"slug": "th", "title": "Treasure hunt"}, headers=prof)
    assert r.status_code == 201, r.text
    code = r.json()["join_code"]
    r = client.post("/api/courses/th/assignments/import",
                    json={"path": "treasure-hunt/t1-multiprocessing"}, headers=prof)
    assert r.status_code == 201, r.text
    finish_validation(client)
    for email, alias in (("ada@uni.edu", "ada"), ("bob@uni.edu", "bob")):
        r = client.post("/api/auth/register", json={"email": email, "name": alias,
                                                    "password": "studentpass1",
                                                    "join_code": code, "alias": alias})
        assert r.status_code == 201, r.text
    return World(client, prof, login(client, "ada@uni.edu", "studentpass1"),
                 login(client, "bob@uni.edu", "studentpass1"), code)


# The fleet token, and the key of the one runner process these tests play (a job answers its claimer).
RUNNER = {"Authorization": "Bearer runner-secret-1234", "X-Runner-Key": "test-runner-key-0123456789"}


def claim(client: Any, queues: tuple[str, ...] = ("cpu", "mpi", "gpu"),
          sessions: Any = None) -> dict | None:  # type: ignore[type-arg]
    """Play the runner that a broker message reached: claim the next queued job by its id
    (`client`: a TestClient, or a live platform's HTTP client with its `sessions`)."""
    from server.models import Job

    with (sessions or client.app.state.sessions)() as s:
        job_id = s.scalar(select(Job.id).where(Job.state == "queued", Job.queue.in_(queues))
                          .order_by(Job.priority, Job.id).limit(1))
    if job_id is None:
        return None
    r = client.post(f"/api/runner/jobs/{job_id}/claim", params={"runner": "test-runner"},
                    headers=RUNNER)
    assert r.status_code == 200, r.text
    return dict(r.json())


def finish_validation(client: Any, ok: bool = True,
                      test_seconds: dict[str, float] | None = None,
                      sessions: Any = None) -> dict[str, Any]:
    """Play the runner for a pending validate job (as a runner would post its checks;
    `test_seconds`: the reference's seconds per test)."""
    offer = claim(client, sessions=sessions)
    assert offer is not None and offer["validate_job"] is not None, offer
    checks = [{"name": "reference passes", "ok": ok, "test_seconds": test_seconds,
               "problems": [] if ok else ["hidden/test_hidden.py::test_x: failed: expected 3"]}]
    r = client.post(f"/api/runner/jobs/{offer['job_id']}/result", json={"checks": checks},
                    headers={**RUNNER, "X-Job-Token": offer["token"]})
    assert r.status_code == 204, r.text
    return dict(offer)


def zip_of(files: dict[str, bytes], method: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as zf:
        for name, content in files.items():
            zf.writestr(name, content)
    return buf.getvalue()


REFERENCE = (REPO_ROOT / "assignments/treasure-hunt/t1-multiprocessing/reference/solution.py"
             ).read_bytes()
