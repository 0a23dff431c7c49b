"""Names every part checks before it writes a file or keys a row under them: file paths, slugs."""

from __future__ import annotations

import re

SLUG_RE = r"^[a-z0-9][a-z0-9-]{0,62}$"
_NAME_PART_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")


def check_relpath(name: str) -> str:
    """`name` if it is a safe relative file name (posix parts of letters, digits, `_.-`, no part
    starting with a dot, at most 8 deep), else ValueError saying why: a manifest's names, a
    package's starter and test files, and each file the runner stages into a sandbox
    (runners/runs/stage.py). Archives themselves are read by runners/protocol/archives.py."""
    if not isinstance(name, str) or not name:
        raise ValueError("a file name must not be empty")
    if "\\" in name or "\x00" in name:
        raise ValueError(f"{name!r}: backslashes and NUL are not allowed in file names")
    if name.startswith("/"):
        raise ValueError(f"{name!r}: an absolute path is not allowed")
    parts = name.split("/")
    if len(parts) > 8:
        raise ValueError(f"{name!r}: nested too deep")
    for part in parts:
        if part in ("", ".", ".."):
            raise ValueError(f"{name!r}: empty, '.' and '..' path parts are not allowed")
        if not _NAME_PART_RE.match(part):
            raise ValueError(f"{name!r}: use letters, digits, '_', '.' and '-' only (no leading dot)")
    return name
