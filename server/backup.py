"""Backup and restore: the database and the artifacts it names, taken together while serving.

A submission is a row and a content-addressed file, so a copy of either alone is broken. A
backup first takes one consistent snapshot of the database (SQLite's online backup API; on
PostgreSQL, pg_dump inside a snapshot this module exports and reads the artifact list in), then
copies every artifact file that snapshot names. A file is written before its row commits and
never changes (its name is its hash; none is ever deleted), so every row of the snapshot finds
its file whatever uploads arrive meanwhile; later uploads are left out with their rows. The
backup is written to `DEST.partial` and renamed when whole: a folder named DEST is a complete
backup.

Restore puts both into an empty install (refused otherwise: it never mixes two terms' data),
checks every file against its hash, and upgrades the schema to this release's, so a backup from
an earlier release opens with its data.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import create_engine, inspect, make_url, text

from server import backup_seal, migrate
from server.services.records.artifacts import path_of

FORMAT = 1
MANIFEST = "paragrade-backup.json"
SIGNATURE = "paragrade-backup.sig"
"""HMAC-SHA256 of the manifest's bytes under the operator's backup key, in hex (where one is
set): the manifest names the database file's checksum, and the database names every artifact,
each checked against its hash, so the one signature covers the whole backup."""
SQLITE_FILE = "database.sqlite"
PG_FILE = "database.pgdump"


class BackupError(Exception):
    """A backup or restore that cannot be done, in words an operator can act on."""


@dataclass(frozen=True)
class Summary:
    """What a backup holds (or a restore put in place)."""

    format: int
    database: str  # sqlite | postgresql
    revision: str | None  # the schema's Alembic revision at the snapshot
    artifacts: int
    artifact_bytes: int
    submissions: int
    created_at: str
    database_sha256: str = ""  # of the database's file in the backup (its plain text)
    encrypted: bool = False  # sealed with a passphrase (server/backup_seal.py)


def _kind(url: str) -> str:
    name = make_url(url).get_backend_name()
    if name not in ("sqlite", "postgresql"):
        raise BackupError(f"backups cover SQLite and PostgreSQL, not {name}")
    return name


def _sqlite_path(url: str) -> Path:
    path = make_url(url).database
    if not path or path == ":memory:":
        raise BackupError("the database is in memory: there is nothing on disk to back up")
    return Path(path)


def _pg_env(url: str) -> dict[str, str]:
    """libpq's variables for `url`: the password never appears on a command line."""
    u = make_url(url)
    env = {"PGHOST": u.host or "", "PGPORT": str(u.port or 5432), "PGUSER": u.username or "",
           "PGDATABASE": u.database or ""}
    if u.password:
        env["PGPASSWORD"] = str(u.password)
    return {**os.environ, **{k: v for k, v in env.items() if v}}


def _pg_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise BackupError(f"{name} is not installed (Debian: apt-get install postgresql-client)")
    return path


def _run(cmd: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise BackupError(f"{Path(cmd[0]).name} failed: {done.stderr.strip()[-2000:]}")


def _summary(rows: list[tuple[str, int]], revision: str | None, submissions: int,
             kind: str) -> Summary:
    return Summary(format=FORMAT, database=kind, revision=revision, artifacts=len(rows),
                   artifact_bytes=sum(size for _, size in rows), submissions=submissions,
                   created_at=datetime.now(UTC).isoformat(timespec="seconds"))


ARTIFACTS = "SELECT sha256, size FROM artifacts"
REVISION = "SELECT version_num FROM alembic_version"
SUBMISSIONS = "SELECT count(*) FROM submissions"


@contextlib.contextmanager
def _snapshot(url: str, work: Path) -> Iterator[tuple[list[tuple[str, int]], str | None, int]]:
    """The database copied into `work` as one snapshot; yields that snapshot's artifacts
    (sha256, size), schema revision and submission count."""
    if _kind(url) == "sqlite":
        source = _sqlite_path(url)
        if not source.is_file():
            raise BackupError(f"no database at {source}")
        with contextlib.closing(sqlite3.connect(source)) as src, \
                contextlib.closing(sqlite3.connect(work / SQLITE_FILE)) as dst:
            src.backup(dst)  # consistent, whatever writers do meanwhile (WAL included)
            dst.execute("PRAGMA journal_mode=DELETE")  # one file, no WAL beside it
            rows = [(str(s), int(n)) for s, n in dst.execute(ARTIFACTS)]
            revision = dst.execute(REVISION).fetchone()
            count = int(dst.execute(SUBMISSIONS).fetchone()[0])
        yield rows, revision[0] if revision else None, count
        return
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            conn.execute(text("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"))
            snapshot = conn.execute(text("SELECT pg_export_snapshot()")).scalar_one()
            rows = [(str(s), int(n)) for s, n in conn.execute(text(ARTIFACTS))]
            revision = conn.execute(text(REVISION)).scalar()
            count = int(conn.execute(text(SUBMISSIONS)).scalar_one())
            # pg_dump reads the same snapshot while this transaction holds it open.
            _run([_pg_tool("pg_dump"), "--format=custom", "--no-owner", "--no-privileges",
                  f"--snapshot={snapshot}", f"--file={work / PG_FILE}"], _pg_env(url))
            conn.execute(text("COMMIT"))
    finally:
        engine.dispose()
    yield rows, revision, count


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _verify(src: Path, sha: str) -> None:
    """Refuse an artifact whose content is not its name."""
    if _sha256(src) != sha:
        raise BackupError(f"artifact {sha[:12]} does not match its hash: the file at {src} is "
                          "damaged")


def _copy(src: Path, dst: Path) -> None:
    """Copy one file, atomically at `dst`."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dst.parent)
    os.close(fd)
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def _private(root: Path) -> None:
    """Folders 0700 and files 0600 under `root`, whatever the umask made them: a backup holds
    every password hash and the LTI tool's private key."""
    root.chmod(0o700)
    for folder, dirs, files in os.walk(root):  # the backup's own tree: no link in it
        for name, mode in [(d, 0o700) for d in dirs] + [(f, 0o600) for f in files]:
            if not os.path.islink(path := os.path.join(folder, name)):
                os.chmod(path, mode)


def _signature(key: str, manifest: bytes) -> str:
    return hmac.new(key.encode(), manifest, hashlib.sha256).hexdigest()


def _check_signature(src: Path, key: str | None) -> None:
    """With a backup key: the backup must be signed with it (nothing to check without one)."""
    if key is None:
        return
    try:
        signed = (src / SIGNATURE).read_text().strip()
    except FileNotFoundError:
        raise BackupError(f"{src} is not signed, and this install signs its backups "
                          "(PARAGRADE_SERVER_BACKUP_KEY): it was not made here, or its "
                          "signature was removed") from None
    if not hmac.compare_digest(signed, _signature(key, (src / MANIFEST).read_bytes())):
        raise BackupError(f"{src}'s signature does not match this install's backup key: it was "
                          "changed after it was made, or signed with another key")


def backup(*, url: str, artifacts_dir: Path, dest: Path, key: str | None = None,
           passphrase: str | None = None) -> Summary:
    """Back up the database at `url` and the artifacts it names into the folder `dest`, signed
    with `key` and sealed with `passphrase` where they are given."""
    if os.path.lexists(dest):  # a link, even one to nowhere, is a path that exists
        raise BackupError(f"{dest} exists: a backup goes into a new folder")
    work = dest.with_name(dest.name + ".partial")
    if work.is_symlink() or (os.path.lexists(work) and not work.is_dir()):
        raise BackupError(f"{work} is a link or a file, not a backup left unfinished: remove it "
                          "and back up again")
    shutil.rmtree(work, ignore_errors=True)  # an earlier backup's unfinished folder
    try:
        os.mkdir(work, 0o700)  # fails where anything appeared at the name meanwhile
    except FileExistsError as exc:
        raise BackupError(f"{work} appeared while the backup started: back up again") from exc
    (work / "artifacts").mkdir(mode=0o700)
    try:
        with _snapshot(url, work) as (rows, revision, count):
            missing = [sha for sha, _ in rows if not path_of(artifacts_dir, sha).is_file()]
            if missing:
                raise BackupError(f"{len(missing)} artifact file(s) named by the database are not "
                                  f"in {artifacts_dir} (first: {missing[0][:12]}): is that the "
                                  "server's artifacts folder?")
            for sha, _ in rows:
                _verify(path_of(artifacts_dir, sha), sha)
                _copy(path_of(artifacts_dir, sha), path_of(work / "artifacts", sha))
            summary = _summary(rows, revision, count, _kind(url))
        summary = replace(summary, database_sha256=_sha256(work / _database_file(summary)),
                          encrypted=passphrase is not None)
        if passphrase is not None:
            try:
                backup_seal.seal(work, passphrase, keep=set())
            except backup_seal.SealError as exc:
                raise BackupError(str(exc)) from None
        manifest = (json.dumps(asdict(summary), indent=2) + "\n").encode()
        (work / MANIFEST).write_bytes(manifest)
        if key is not None:
            (work / SIGNATURE).write_text(_signature(key, manifest) + "\n")
        _private(work)
        os.replace(work, dest)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return summary


def read_manifest(src: Path) -> Summary:
    """What the backup folder `src` says it holds; BackupError if it is not one."""
    try:
        data = json.loads((src / MANIFEST).read_text())
        summary = Summary(**data)
    except FileNotFoundError:
        raise BackupError(f"{src} is not a paragrade backup (no {MANIFEST})") from None
    except (ValueError, TypeError) as exc:
        raise BackupError(f"{src / MANIFEST} is damaged: {exc}") from None
    if summary.format != FORMAT:
        raise BackupError(f"backup format {summary.format}; this release reads format {FORMAT}")
    return summary


def _database_file(summary: Summary) -> str:
    return SQLITE_FILE if summary.database == "sqlite" else PG_FILE


def verify(src: Path, key: str | None = None, passphrase: str | None = None) -> Summary:
    """Check the backup folder `src` without restoring it: its signature (with a backup key),
    its manifest, the database file's checksum and integrity, that the artifacts it names are
    the files there, every artifact against its hash (a sealed one opened with `passphrase`)."""
    summary = read_manifest(src)
    _check_signature(src, key)
    with _plain(src, summary, passphrase) as plain:
        _check(plain, summary)
    return summary


@contextlib.contextmanager
def _plain(src: Path, summary: Summary, passphrase: str | None) -> Iterator[Path]:
    """The backup's files in plain text: `src` itself, or a sealed one opened."""
    if not summary.encrypted:
        yield src
        return
    try:
        with backup_seal.opened(src, passphrase, keep={MANIFEST}) as plain:
            yield plain
    except backup_seal.SealError as exc:
        raise BackupError(str(exc)) from None


def _check(src: Path, summary: Summary) -> None:
    db = src / _database_file(summary)
    if not db.is_file() or _sha256(db) != summary.database_sha256:
        raise BackupError(f"{db} is missing or damaged (its checksum differs from the manifest's)")
    files = [p for p in (src / "artifacts").rglob("*") if p.is_file()]
    if len(files) != summary.artifacts:
        raise BackupError(f"the backup holds {len(files)} artifact files; its manifest says "
                          f"{summary.artifacts}")
    for path in files:
        _verify(path, path.name)
    if _named_artifacts(summary, db) != {p.name for p in files}:
        raise BackupError("the database and the artifact files of the backup do not match")


def _named_artifacts(summary: Summary, db: Path) -> set[str]:
    """The artifacts the backup's database names, read from its file without restoring it
    (SQLite: read-only, after its integrity check; PostgreSQL: the dump's artifacts table, as
    pg_restore prints it)."""
    if summary.database == "sqlite":
        try:
            with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro&immutable=1",
                                                    uri=True)) as conn:
                if conn.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
                    raise BackupError(f"{db} fails SQLite's integrity check")
                return {str(sha) for (sha, _) in conn.execute(ARTIFACTS)}
        except sqlite3.DatabaseError as exc:  # truncated, or not a database at all
            raise BackupError(f"{db} is not a whole SQLite database ({exc})") from None
    done = subprocess.run([_pg_tool("pg_restore"), "--data-only", "--table=artifacts",
                           "--file=-", str(db)], capture_output=True, text=True)
    if done.returncode != 0:
        raise BackupError(f"{db} is not a whole PostgreSQL dump: {done.stderr.strip()[-500:]}")
    named: set[str] = set()
    columns: list[str] | None = None
    for line in done.stdout.splitlines():
        if line.startswith("COPY ") and " FROM stdin;" in line:
            columns = [c.strip() for c in line[line.index("(") + 1:line.index(")")].split(",")]
        elif line == "\\.":
            columns = None
        elif columns is not None:
            named.add(line.split("\t")[columns.index("sha256")])
    return named


def _empty_database(url: str) -> bool:
    """No tables, or the schema alone (migrated, nobody in it yet)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            tables = set(inspect(conn).get_table_names())
            if not {"users", "submissions"} <= tables:
                return not tables
            return not conn.execute(text(
                "SELECT EXISTS (SELECT 1 FROM users) OR EXISTS (SELECT 1 FROM submissions)"
            )).scalar_one()
    finally:
        engine.dispose()


def restore(*, src: Path, url: str, artifacts_dir: Path, key: str | None = None,
            passphrase: str | None = None) -> Summary:
    """Restore the backup folder `src` into the empty database at `url` and `artifacts_dir`,
    then bring the schema to this release's; with a backup `key`, only a backup it signed; a
    sealed one opened with `passphrase`."""
    summary = read_manifest(src)
    _check_signature(src, key)
    with _plain(src, summary, passphrase) as plain:
        _check(plain, summary)  # every file checked before anything is written
        _restore_checked(plain, summary, url, artifacts_dir)
    return summary


def _restore_checked(src: Path, summary: Summary, url: str, artifacts_dir: Path) -> None:
    kind = _kind(url)
    if summary.database != kind:
        raise BackupError(f"this backup holds a {summary.database} database; the server is "
                          f"configured for {kind}")
    if artifacts_dir.exists() and any(p.is_file() for p in artifacts_dir.rglob("*")):
        raise BackupError(f"{artifacts_dir} holds files already: restore into an empty install")
    files = [p for p in (src / "artifacts").rglob("*") if p.is_file()]
    if kind == "sqlite":
        target = _sqlite_path(url)
        if target.exists() and not _empty_database(url):
            raise BackupError(f"{target} holds data already: restore into an empty install")
    elif not _empty_database(url):
        raise BackupError(f"the database {make_url(url).database} holds data already: "
                          "restore into an empty one (createdb)")
    try:
        _put_in_place(src, url, files, artifacts_dir)
    except BaseException:
        _empty_out(url, artifacts_dir)  # as it was: empty, and the restore can be tried again
        raise


def _put_in_place(src: Path, url: str, files: list[Path], artifacts_dir: Path) -> None:
    """Write the checked backup into the empty install and upgrade its schema."""
    if _kind(url) == "sqlite":
        target = _sqlite_path(url)
        target.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.closing(sqlite3.connect(src / SQLITE_FILE)) as s, \
                contextlib.closing(sqlite3.connect(target)) as d:
            s.backup(d)
    else:
        _run([_pg_tool("pg_restore"), "--no-owner", "--no-privileges", "--exit-on-error",
              "--single-transaction", "--clean", "--if-exists",
              f"--dbname={make_url(url).database}", str(src / PG_FILE)], _pg_env(url))
    for path in files:
        _copy(path, path_of(artifacts_dir, path.name))
    migrate.upgrade(url)
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = [(str(s), int(n)) for s, n in conn.execute(text(ARTIFACTS))]
    finally:
        engine.dispose()
    missing = [sha for sha, _ in rows if not path_of(artifacts_dir, sha).is_file()]
    if missing:
        raise BackupError(f"{len(missing)} artifact(s) the database names are not in the backup "
                          f"(first: {missing[0][:12]})")


def _empty_out(url: str, artifacts_dir: Path) -> None:
    """Undo a restore that failed part-way: the install was empty before it (restore checked),
    so every table and artifact file goes."""
    if _kind(url) == "sqlite":
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{_sqlite_path(url)}{suffix}").unlink(missing_ok=True)
    else:
        engine = create_engine(url)
        try:
            with engine.begin() as conn:
                conn.execute(text("DROP SCHEMA public CASCADE"))
                conn.execute(text("CREATE SCHEMA public"))
        finally:
            engine.dispose()
    if artifacts_dir.exists():
        for child in artifacts_dir.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
