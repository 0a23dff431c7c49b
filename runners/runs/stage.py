"""A grading's scratch area: world-readable copies of what its runs see (harness, code, data)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from runners.harness import worker as wire
from runners.protocol import check_relpath

HARNESS_DIR = Path(wire.__file__).resolve().parent


class UnsafeFileName(ValueError):
    """A code file's name would be written outside its folder (or is not a plain name).

    The server checks every name at upload and import, so one reaching a runner means the
    server let it through: the worker answers a platform_error (logged, retried a bounded
    number of times, never charged to the student) rather than a verdict it cannot prove.
    """


def _chmod_tree(root: Path) -> None:
    for dirpath, _dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for f in filenames:
            os.chmod(os.path.join(dirpath, f), 0o644)


class Stage:
    """A grading's scratch area: copies of the harness, the code under test and the data."""

    def __init__(self, *, scratch: Path | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="paragrade-", dir=scratch))
        os.chmod(self.root, 0o711)  # traversable by the sandbox user, not listable
        self.harness = self.root / "harness"
        shutil.copytree(HARNESS_DIR, self.harness, ignore=shutil.ignore_patterns("__pycache__"))
        _chmod_tree(self.harness)
        self.data: Path | None = None

    def add_code(self, name: str, files: dict[str, bytes]) -> Path:
        """A folder holding one side's code (submission, baseline, reference).

        Names come from the server and are checked again here (the runner may run as root):
        UnsafeFileName, a ValueError, for any name that is not a plain relative path inside the
        folder; nothing is written then.
        """
        d = self.root / f"code-{name}"
        for rel in files:
            try:
                check_relpath(rel)
            except ValueError as exc:
                raise UnsafeFileName(f"refused to write {name} code: {exc}") from exc
        d.mkdir()
        inside = d.resolve()
        for rel, content in files.items():
            target = d / rel
            if not target.resolve().is_relative_to(inside):  # a link on the way, however made
                raise UnsafeFileName(f"refused to write {name} code: {rel!r} leaves its folder")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        _chmod_tree(d)
        return d

    def add_data(self, source: Path) -> None:
        self.data = self.root / "data"
        shutil.copytree(source, self.data)
        _chmod_tree(self.data)

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
