"""The boundaries DESIGN.md draws, checked on the source."""

import ast
from pathlib import Path

from runners.settings import REPO_ROOT


def imports_of(folder: Path) -> dict[Path, set[str]]:
    found: dict[Path, set[str]] = {}
    for path in folder.rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
        found[path] = names
    return found


def test_runners_never_import_server() -> None:
    for path, names in imports_of(REPO_ROOT / "runners").items():
        assert not any(n == "server" or n.startswith("server.") for n in names), path


def test_server_imports_only_the_protocol_from_runners() -> None:
    for path, names in imports_of(REPO_ROOT / "server").items():
        bad = {n for n in names if n.startswith("runners") and n != "runners.protocol"}
        assert not bad, f"{path} imports {bad}"


def test_only_settings_reads_the_environment() -> None:
    for path in (REPO_ROOT / "runners").rglob("*.py"):
        if path.name == "settings.py" or "harness" in path.parts:
            continue
        text = path.read_text()
        assert "os.environ.get(" not in text and "os.getenv(" not in text, path


def test_harness_needs_only_the_standard_library() -> None:
    harness = REPO_ROOT / "runners" / "harness" / "worker.py"
    top = {n.split(".")[0] for n in imports_of(harness.parent)[harness]}
    assert top <= {"__future__", "argparse", "base64", "importlib", "json", "math", "mmap", "os",
                   "signal", "socket",
                   "struct", "sys", "traceback", "typing", "mpi4py", "numpy"}
