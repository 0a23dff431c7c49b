"""Backup and restore (server/backup.py, `paragrade admin backup|restore`) on SQLite and
PostgreSQL: taken while uploads arrive, restored into a fresh install that serves what it held."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select

from server import backup
from server.db import make_engine, session_factory
from server.main import create_app
from server.models import Submission
from server.services.records.artifacts import path_of
from server.settings import REPO_ROOT, ServerSettings
from tests.server.conftest import PG_ADMIN, PG_TEST_DB, REFERENCE, World, login


@pytest.fixture
def fresh_url(engine: Engine, tmp_path: Path) -> Iterator[str]:
    """An empty database of the same kind as `engine`'s, for a restore."""
    if engine.dialect.name == "sqlite":
        yield f"sqlite:///{tmp_path / 'restored.db'}"
        return
    name = f"{PG_TEST_DB}_restored"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_a_backup_taken_while_uploading_restores_into_a_fresh_install(
        world: World, engine: Engine, settings: ServerSettings, fresh_url: str,
        tmp_path: Path) -> None:
    world.client.patch("/api/courses/th/assignments/t1-multiprocessing",
                       json={"quota_count": 500}, headers=world.prof)
    for i in range(4):
        assert world.submit(world.ada, REFERENCE + f"\n# {i}\n".encode()).status_code == 201
    assert world.submit(world.bob, REFERENCE + b"\n# 0\n").status_code == 201  # a shared file
    stop, sent = threading.Event(), []

    def keep_uploading() -> None:
        while not stop.is_set():
            r = world.submit(world.bob, REFERENCE + f"\n# during {len(sent)}\n".encode())
            sent.append(r.status_code)

    uploader = threading.Thread(target=keep_uploading)
    uploader.start()
    try:
        while not sent:  # uploads under way before the backup starts, and during it
            time.sleep(0.01)
        dest = tmp_path / "backup"
        took = backup.backup(url=engine.url.render_as_string(hide_password=False),
                             artifacts_dir=settings.artifacts_dir, dest=dest)
    finally:
        stop.set()
        uploader.join(30)
    assert set(sent) <= {201}, sent
    assert took.submissions >= 5 and took.database == engine.dialect.name and took.revision
    assert not dest.with_name("backup.partial").exists()
    assert backup.read_manifest(dest) == took and backup.verify(dest) == took

    # A fresh install: the backup's database and files, every file matching its hash.
    artifacts = tmp_path / "restored-artifacts"
    done = backup.restore(src=dest, url=fresh_url, artifacts_dir=artifacts)
    assert done == took
    restored = make_engine(fresh_url)
    try:
        with session_factory(restored)() as s:
            archives = list(s.scalars(select(Submission.archive_sha256)))
            assert len(archives) == took.submissions
            for sha in archives:
                assert hashlib.sha256(path_of(artifacts, sha).read_bytes()).hexdigest() == sha
        # It serves what it held: the students sign in with their passwords and read their
        # submissions; an upload is taken.
        again = settings.model_copy(update={"artifacts_dir": artifacts})
        with TestClient(create_app(again, restored)) as c:
            ada = login(c, "ada@uni.edu", "studentpass1")
            mine = c.get("/api/submissions", headers=ada).json()
            assert len(mine) == 4 and all(m["status"] == "queued" for m in mine)
            r = c.post("/api/courses/th/assignments/t1-multiprocessing/submissions", headers=ada,
                       files=[("files", ("solution.py", REFERENCE + b"\n# after\n"))])
            assert r.status_code == 201, r.text
        # A second restore over it is refused, and changes nothing.
        with pytest.raises(backup.BackupError, match="holds"):
            backup.restore(src=dest, url=fresh_url, artifacts_dir=artifacts)
        with session_factory(restored)() as s:
            assert len(list(s.scalars(select(Submission.id)))) == took.submissions + 1
    finally:
        restored.dispose()


def test_backup_and_restore_refuse_what_they_cannot_do(world: World, engine: Engine,
                                                       settings: ServerSettings, fresh_url: str,
                                                       tmp_path: Path) -> None:
    url = engine.url.render_as_string(hide_password=False)
    dest = tmp_path / "b"
    dest.mkdir()
    with pytest.raises(backup.BackupError, match="exists"):
        backup.backup(url=url, artifacts_dir=settings.artifacts_dir, dest=dest)
    with pytest.raises(backup.BackupError, match="not a paragrade backup"):
        backup.restore(src=dest, url="sqlite:///" + str(tmp_path / "x.db"),
                       artifacts_dir=tmp_path / "a")
    world.submit(world.ada, REFERENCE)
    with pytest.raises(backup.BackupError, match="not in"):  # the wrong artifacts folder
        backup.backup(url=url, artifacts_dir=tmp_path / "elsewhere", dest=tmp_path / "c")
    assert not (tmp_path / "c").exists() and not (tmp_path / "c.partial").exists()
    good = tmp_path / "good"
    took = backup.backup(url=url, artifacts_dir=settings.artifacts_dir, dest=good)
    other = "postgresql+psycopg://postgres@127.0.0.1:5432/none" if took.database == "sqlite" \
        else "sqlite:///" + str(tmp_path / "y.db")
    with pytest.raises(backup.BackupError, match="holds a"):  # SQLite into PostgreSQL, or back
        backup.restore(src=good, url=other, artifacts_dir=tmp_path / "a2")
    db = good / ("database.sqlite" if took.database == "sqlite" else "database.pgdump")
    assert sorted(p.name for p in good.iterdir()) == ["artifacts", db.name, backup.MANIFEST]
    whole = db.read_bytes()
    db.write_bytes(whole[:-1] + bytes([whole[-1] ^ 1]))
    with pytest.raises(backup.BackupError, match="missing or damaged"):
        backup.verify(good)
    db.write_bytes(whole)
    next(p for p in (good / "artifacts").rglob("*") if p.is_file()).write_bytes(b"damaged")
    with pytest.raises(backup.BackupError, match="does not match its hash"):
        backup.verify(good)
    with pytest.raises(backup.BackupError, match="does not match its hash"):
        backup.restore(src=good, url=fresh_url, artifacts_dir=tmp_path / "a3")
    # Refused before anything was written: the install is still empty, the restore can be tried
    # again with a good copy.
    assert not (tmp_path / "a3").exists() and backup._empty_database(fresh_url)


def test_a_backup_is_private_whatever_the_umask_and_goes_only_where_it_is_told(
        world: World, engine: Engine, settings: ServerSettings, tmp_path: Path) -> None:
    """It holds every password hash and the LTI key: folders 0700, files 0600 under umask 022;
    a planted link at the target or at its unfinished folder is refused, and nothing is written
    where either points."""
    url = engine.url.render_as_string(hide_password=False)
    world.submit(world.ada, REFERENCE)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "t.partial").symlink_to(elsewhere)
    (tmp_path / "u").symlink_to(tmp_path / "nowhere")
    old = os.umask(0o022)
    try:
        with pytest.raises(backup.BackupError, match="is a link or a file"):
            backup.backup(url=url, artifacts_dir=settings.artifacts_dir, dest=tmp_path / "t")
        with pytest.raises(backup.BackupError, match="exists"):  # a dangling link
            backup.backup(url=url, artifacts_dir=settings.artifacts_dir, dest=tmp_path / "u")
        assert list(elsewhere.iterdir()) == [] and not (tmp_path / "t").exists()
        assert not (tmp_path / "nowhere").exists()
        good = tmp_path / "good"
        backup.backup(url=url, artifacts_dir=settings.artifacts_dir, dest=good)
    finally:
        os.umask(old)
    modes = {p.relative_to(good).as_posix(): (p.is_dir(), stat.S_IMODE(p.stat().st_mode))
             for p in [good, *good.rglob("*")]}
    assert any(not d for d, _ in modes.values()), modes  # files were checked, not folders only
    wrong = {k: oct(m) for k, (d, m) in modes.items() if m != (0o700 if d else 0o600)}
    assert not wrong, wrong
    backup.verify(good)  # still a whole backup


def _forged(good: Path, to: Path, *, database: bytes | None = None,
            drop_artifact: bool = False) -> Path:
    """A copy of the backup `good`, changed, with its manifest's checksum and count recomputed
    (what a careless copy or a forger would leave): integrity checks alone must catch it."""
    shutil.copytree(good, to)
    manifest = json.loads((to / backup.MANIFEST).read_text())
    db = to / ("database.sqlite" if manifest["database"] == "sqlite" else "database.pgdump")
    if database is not None:
        db.write_bytes(database)
    if drop_artifact:
        next(p for p in (to / "artifacts").rglob("*") if p.is_file()).unlink()
        manifest["artifacts"] -= 1
    manifest["database_sha256"] = hashlib.sha256(db.read_bytes()).hexdigest()
    (to / backup.MANIFEST).write_text(json.dumps(manifest))
    return db


def test_restore_checks_everything_before_it_writes_and_a_failed_one_can_be_tried_again(
        world: World, engine: Engine, settings: ServerSettings, fresh_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    url = engine.url.render_as_string(hide_password=False)
    world.submit(world.ada, REFERENCE)
    good = tmp_path / "good"
    took = backup.backup(url=url, artifacts_dir=settings.artifacts_dir, dest=good)
    whole = (good / ("database.sqlite" if took.database == "sqlite" else "database.pgdump")
             ).read_bytes()
    kind = "SQLite database" if took.database == "sqlite" else "PostgreSQL dump"
    truncated = tmp_path / "truncated"
    _forged(good, truncated, database=whole[:len(whole) // 3])
    with pytest.raises(backup.BackupError, match=f"not a whole {kind}"):
        backup.restore(src=truncated, url=fresh_url, artifacts_dir=tmp_path / "a1")
    # An artifact gone, the count made to agree: the database still names it (both kinds).
    short = tmp_path / "short"
    _forged(good, short, drop_artifact=True)
    with pytest.raises(backup.BackupError, match="do not match"):
        backup.verify(short)
    assert not (tmp_path / "a1").exists() and backup._empty_database(fresh_url)
    # A restore that fails once it has written (here the schema's upgrade) leaves the install
    # empty, and the next try restores it whole.
    def broken(_: str) -> None:
        raise backup.BackupError("the upgrade failed (injected)")
    monkeypatch.setattr(backup.migrate, "upgrade", broken)
    with pytest.raises(backup.BackupError, match="injected"):
        backup.restore(src=good, url=fresh_url, artifacts_dir=tmp_path / "a2")
    assert backup._empty_database(fresh_url)
    assert not any(p.is_file() for p in (tmp_path / "a2").rglob("*"))
    monkeypatch.undo()
    again = backup.restore(src=good, url=fresh_url, artifacts_dir=tmp_path / "a2")
    assert again.submissions == took.submissions and not backup._empty_database(fresh_url)


def test_a_signed_backup_changed_with_its_checksums_recomputed_is_refused(
        world: World, engine: Engine, settings: ServerSettings, fresh_url: str,
        tmp_path: Path) -> None:
    """Integrity checks alone take a forged backup whose checksums were recomputed; the
    signature under a key kept outside the backup does not."""
    url = engine.url.render_as_string(hide_password=False)
    key, other = "k" * 32, "o" * 32
    world.submit(world.ada, REFERENCE)
    good = tmp_path / "good"
    backup.backup(url=url, artifacts_dir=settings.artifacts_dir, dest=good, key=key)
    assert stat.S_IMODE((good / backup.SIGNATURE).stat().st_mode) == 0o600
    backup.verify(good, key)
    forged = tmp_path / "forged"
    db = _forged(good, forged)  # the manifest rewritten: its bytes are not what was signed
    backup.verify(forged)  # no key: integrity only, and it holds
    with pytest.raises(backup.BackupError, match="does not match this install's backup key"):
        backup.verify(forged, key)
    with pytest.raises(backup.BackupError, match="does not match"):
        backup.verify(good, other)
    (forged / backup.SIGNATURE).unlink()
    with pytest.raises(backup.BackupError, match="is not signed"):
        backup.restore(src=forged, url=fresh_url, artifacts_dir=tmp_path / "a", key=key)
    assert db.is_file() and backup._empty_database(fresh_url)
    assert backup.restore(src=good, url=fresh_url, artifacts_dir=tmp_path / "a",
                          key=key).submissions >= 1


def test_a_sealed_backup_reads_as_nothing_without_its_passphrase(
        world: World, engine: Engine, settings: ServerSettings, fresh_url: str,
        tmp_path: Path) -> None:
    url = engine.url.render_as_string(hide_password=False)
    world.submit(world.ada, REFERENCE)
    sealed = tmp_path / "sealed"
    words = "orchid-lantern-gravel-41"
    took = backup.backup(url=url, artifacts_dir=settings.artifacts_dir, dest=sealed,
                         passphrase=words)
    assert took.encrypted and backup.read_manifest(sealed).encrypted
    # No password hash, no code, no table in plain text anywhere in it.
    for path in (p for p in sealed.rglob("*") if p.is_file()):
        data = path.read_bytes()
        assert b"argon2" not in data and b"SQLite format" not in data and b"PGDMP" not in data
        assert b"def parallel_sum" not in data, path
    with pytest.raises(backup.BackupError, match="is encrypted: give its passphrase"):
        backup.verify(sealed)
    with pytest.raises(backup.BackupError, match="does not open with this passphrase"):
        backup.restore(src=sealed, url=fresh_url, artifacts_dir=tmp_path / "a",
                       passphrase="another-passphrase-9")
    assert backup._empty_database(fresh_url) and not (tmp_path / "a").exists()
    assert backup.verify(sealed, passphrase=words) == took
    assert backup.restore(src=sealed, url=fresh_url, artifacts_dir=tmp_path / "a",
                          passphrase=words).submissions == took.submissions
    assert any(p.is_file() for p in (tmp_path / "a").rglob("*"))
    with pytest.raises(backup.BackupError, match="at least 12 characters"):
        backup.backup(url=url, artifacts_dir=settings.artifacts_dir, dest=tmp_path / "s2",
                      passphrase="short")
    assert not (tmp_path / "s2").exists() and not (tmp_path / "s2.partial").exists()


def test_the_commands_say_what_they_did_or_why_not(tmp_path: Path) -> None:
    """`paragrade admin backup|restore` on the embedded defaults' kind of install: a message,
    never a traceback."""
    # The broker too: create-instructor imports the shipped courses, whose checks it publishes
    # (into the checkout's var/broker.sqlite, without it, for a later start's runner to drop).
    env = {**os.environ, "PARAGRADE_SERVER_DATABASE_URL": f"sqlite:///{tmp_path / 'p.db'}",
           "PARAGRADE_SERVER_ARTIFACTS_DIR": str(tmp_path / "art"),
           "PARAGRADE_SERVER_BROKER_URL": f"sqla+sqlite:///{tmp_path / 'broker.sqlite'}"}

    def admin(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "paragrade.cli", "admin", *args],
                              cwd=REPO_ROOT, env={**env, **extra}, capture_output=True, text=True,
                              timeout=120)

    made = admin("create-instructor", "prof@uni.edu", "--password", "orchid-lantern-gravel-41")
    assert made.returncode == 0, made.stderr
    r = admin("backup", str(tmp_path / "bk"))
    assert r.returncode == 0 and "backed up sqlite" in r.stdout and "into" in r.stdout, r.stderr
    r = admin("backup", str(tmp_path / "bk"))
    assert r.returncode == 2 and "exists" in r.stdout and "Traceback" not in r.stderr
    r = admin("backup", "--verify", str(tmp_path / "bk"))
    assert r.returncode == 0 and "checked sqlite" in r.stdout, r.stdout + r.stderr
    fresh = {"PARAGRADE_SERVER_DATABASE_URL": f"sqlite:///{tmp_path / 'q.db'}",
             "PARAGRADE_SERVER_ARTIFACTS_DIR": str(tmp_path / "art2")}
    r = admin("restore", str(tmp_path / "bk"), **fresh)
    assert r.returncode == 0 and "restored" in r.stdout, r.stdout + r.stderr
    r = admin("restore", str(tmp_path / "bk"), **fresh)
    assert r.returncode == 2 and "holds" in r.stdout and "Traceback" not in r.stderr
    # Sealed with a passphrase (from the environment, as cron gives it): restored only with it.
    secret = {"PARAGRADE_SERVER_BACKUP_PASSPHRASE": "quiet-harbour-lantern-77"}
    r = admin("backup", "--encrypt", str(tmp_path / "sealed"), **secret)
    assert r.returncode == 0 and "encrypted" in r.stdout, r.stdout + r.stderr
    third = {"PARAGRADE_SERVER_DATABASE_URL": f"sqlite:///{tmp_path / 'r.db'}",
             "PARAGRADE_SERVER_ARTIFACTS_DIR": str(tmp_path / "art3")}
    r = admin("restore", str(tmp_path / "sealed"), **third,
              PARAGRADE_SERVER_BACKUP_PASSPHRASE="not-the-passphrase-at-all")
    said = " ".join(r.stdout.split())  # rich folds long lines
    assert r.returncode == 2 and "does not open with this passphrase" in said, r.stdout
    assert "Traceback" not in r.stderr
    r = admin("restore", str(tmp_path / "sealed"), **third, **secret)
    assert r.returncode == 0 and "restored" in r.stdout, r.stdout + r.stderr
    r = admin("downgrade", "0013", **fresh)
    assert r.returncode == 2 and "take a backup" in r.stdout
    r = admin("downgrade", "nonsense", "--yes", **fresh)
    assert r.returncode == 2 and "nonsense" in r.stdout and "Traceback" not in r.stderr
    r = admin("downgrade", "0013", "--yes", **fresh)
    assert r.returncode == 0 and "the schema is at 0013" in r.stdout, r.stdout + r.stderr
