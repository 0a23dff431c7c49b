"""Backup, verify and restore at a term's scale (server/backup.py) on the real PostgreSQL.

Seeds bench.server_throughput's course (N stored submissions: up to 10 000 through the services,
the rest copies made in SQL; their archives are one file), adds FILES distinct artifacts of 6 KiB
(a term's distinct uploads: rows and files), then times `backup`, `backup --verify` and `restore`
into a fresh database, with the backup's sizes.

Usage: .venv/bin/python -m bench.backup [N] [FILES]   (default 100 000 and 20 000; needs
PostgreSQL on 127.0.0.1:5432 and pg_dump / pg_restore)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from bench.common import publish
from bench.server_throughput import PG_ADMIN, URL, drop_db, recreate_db, seed
from server import backup
from server.services.records.artifacts import path_of

RESTORED = "paragrade_bench_restored"


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _distinct_files(artifacts: Path, k: int) -> None:
    """k distinct artifacts of 6 KiB, stored as uploads store them (file, then row)."""
    rows = []
    for i in range(k):
        data = os.urandom(6 * 1024 - 16) + i.to_bytes(16, "big")
        sha = hashlib.sha256(data).hexdigest()
        target = path_of(artifacts, sha)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        rows.append((sha, len(data)))
    with psycopg.connect(URL.replace("+psycopg", "")) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO artifacts (sha256, size, kind, created_at) "
                        "VALUES (%s, %s, 'submission', now())", rows)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    files = int(sys.argv[2]) if len(sys.argv) > 2 else 20_000
    tmp = Path(tempfile.mkdtemp(prefix="paragrade-backup-bench-"))
    artifacts = tmp / "artifacts"
    try:
        recreate_db()
        seed(artifacts, students_n=min(300, max(1, n // 5)), stored=n)
        _distinct_files(artifacts, files)
        started = time.perf_counter()
        took = backup.backup(url=URL, artifacts_dir=artifacts, dest=tmp / "backup")
        backup_s = time.perf_counter() - started
        started = time.perf_counter()
        backup.verify(tmp / "backup")
        verify_s = time.perf_counter() - started
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {RESTORED} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {RESTORED}")
        started = time.perf_counter()
        backup.restore(src=tmp / "backup", url=URL.rsplit("/", 1)[0] + f"/{RESTORED}",
                       artifacts_dir=tmp / "restored-artifacts")
        restore_s = time.perf_counter() - started
        database = tmp / "backup" / backup.PG_FILE
        publish("backup", [{
            "submissions": took.submissions, "artifacts": took.artifacts,
            "database_mib": database.stat().st_size / 2**20,
            "artifacts_mib": _size(tmp / "backup" / "artifacts") / 2**20,
            "backup_s": backup_s, "verify_s": verify_s, "restore_s": restore_s}], {
            "submissions": "submissions", "artifacts": "artifacts",
            "database_mib": "database dump (MiB) %.1f", "artifacts_mib": "artifacts (MiB) %.1f",
            "backup_s": "backup (s) %.1f", "verify_s": "verify (s) %.1f",
            "restore_s": "restore (s) %.1f"})
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {RESTORED} WITH (FORCE)")
        drop_db()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
