"""Content-addressed files on disk (path configurable), recorded in the artifacts table."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from sqlalchemy.orm import Session

from server.models import Artifact
from server.services.errors import NotFound


def path_of(root: Path, sha256: str) -> Path:
    return root / sha256[:2] / sha256[2:4] / sha256


def store(*, session: Session, root: Path, data: bytes, kind: str) -> str:
    """Write `data` once (atomically) and return its sha256."""
    sha = hashlib.sha256(data).hexdigest()
    target = path_of(root, sha)
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
    if session.get(Artifact, sha) is None:
        session.add(Artifact(sha256=sha, size=len(data), kind=kind))
        session.flush()
    return sha


def read(*, root: Path, sha256: str) -> bytes:
    p = path_of(root, sha256)
    if not p.is_file():
        raise NotFound(f"artifact {sha256[:12]} is missing")
    return p.read_bytes()
