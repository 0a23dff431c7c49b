"""The packages a runner has fetched, unpacked once per bundle hash under its scratch folder."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from runners.protocol import archives


class BundleCache:
    """Assignment bundles unpacked once per content hash, as <root>/<sha>-<course>-<slug>/…"""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def folder(self, assignment: str, sha256: str, fetch: bytes | None = None) -> Path | None:
        """The unpacked package, unpacking `fetch` first if given; None when not cached."""
        course, slug = assignment.split("/", 1)
        # The course name is part of the package's identity on disk (course/slug), so of the key.
        sha_dir = self.root / f"{sha256}-{course}-{slug}"
        target = sha_dir / course / slug
        if target.is_dir() or fetch is None:
            return target if target.is_dir() else None
        tmp = Path(tempfile.mkdtemp(dir=self.root))
        try:  # the one reader of archives (runners/protocol/archives.py), as the server's
            for name, content in archives.members(fetch, max_ratio=None).items():
                path = tmp / course / slug / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(content)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        try:
            os.rename(tmp, sha_dir)  # atomic; another runner may have won the race
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
        return target
