"""Content-addressed files on disk (path configurable), recorded in the artifacts table."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import tempfile
from pathlib import Path

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from server.models import Artifact
from server.services.records.errors import NotFound, StorageFull

log = logging.getLogger(__name__)


def path_of(root: Path, sha256: str) -> Path:
    return root / sha256[:2] / sha256[2:4] / sha256


def sha256_of(data: bytes) -> str:
    """An artifact's name: the sha256 of its bytes."""
    return hashlib.sha256(data).hexdigest()


def store(*, session: Session, root: Path, data: bytes, kind: str) -> str:
    """Write `data` once (atomically, on disk before its row can commit) and return its sha256;
    StorageFull, with nothing left behind, when the disk is full."""
    sha = sha256_of(data)
    target = path_of(root, sha)
    if not target.is_file():
        tmp = None
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())  # a crash after the commit finds the whole file
            os.replace(tmp, target)
        except OSError as exc:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                log.error("the artifacts folder %s is full: an upload of %d bytes was refused",
                          root, len(data))
                raise StorageFull("the server's disk is full: your upload was not stored (the "
                                  "staff are told); try again later") from exc
            raise
    # Two uploads of the same file at once (a starter file at the deadline) both find no row:
    # the second insert does nothing rather than fail on the key.
    row = {"sha256": sha, "size": len(data), "kind": kind}
    if session.get_bind().dialect.name == "postgresql":
        session.execute(postgresql.insert(Artifact).values(row).on_conflict_do_nothing(
            index_elements=[Artifact.sha256]))
    else:
        session.execute(sqlite.insert(Artifact).values(row).on_conflict_do_nothing(
            index_elements=[Artifact.sha256]))
    return sha


def read(*, root: Path, sha256: str) -> bytes:
    p = path_of(root, sha256)
    if not p.is_file():
        raise NotFound(f"artifact {sha256[:12]} is missing")
    return p.read_bytes()
