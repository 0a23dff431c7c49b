"""An assignment page reads the package's statement alone from the stored bundle: the other
members (hidden tests, data) are not unpacked, and a bundle that cannot be read yet shows no
statement without being remembered so."""

from __future__ import annotations

import hashlib
from pathlib import Path

from server.services.packages.assignments import bundle, statement_of
from server.services.records import artifacts


def test_the_statement_is_read_alone_and_a_missing_bundle_is_not_remembered(
        tmp_path: Path) -> None:
    data = bundle({"statement.md": b"# Sum in parallel\n", "assignment.toml": b"schema = 1\n",
                   "hidden/data.bin": bytes(200 << 20)})  # 200 MB unpacked, a few KB stored
    assert len(data) < 1 << 20
    sha = hashlib.sha256(data).hexdigest()
    assert statement_of(tmp_path, sha, "statement.md") == ""  # not stored (yet)
    path = artifacts.path_of(tmp_path, sha)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)  # restored from a backup, say
    assert statement_of(tmp_path, sha, "statement.md") == "# Sum in parallel\n"
    assert statement_of(tmp_path, sha, "README.md") == ""  # a package without that member
