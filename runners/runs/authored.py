"""The package author's trusted code: what it may import, and where it failed.

Modules of a package's hidden folder import each other by plain name (`from expected import
answer`): the hidden tests, the timing hook and the I/O service all run on the trusted side with
the hidden folder first on their import path. The folder never enters a sandbox, so the
submission can import none of it.

A test process is a fresh fork per run: its import path keeps the folder for the whole run. A
runner's own process loads the hooks of many packages in turn: there the folder is on the path
only while one module loads, and the helpers it imported leave `sys.modules` afterwards (the
module keeps its own references), so two packages' `expected.py` never answer for each other.

Where author code fails, the message names the file and line inside the package and the
exception, e.g. `hidden/test_primes.py line 3: ModuleNotFoundError: No module named 'expectd'`:
an instructor reads the cause under the check that failed, not a generic sentence.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

__all__ = ["importable", "load_module", "open_path", "where"]


def open_path(folder: Path) -> None:
    """Put `folder` first on this (fresh, single-package) process's import path for good."""
    entry = str(folder.resolve())
    if entry not in sys.path:
        sys.path.insert(0, entry)


@contextlib.contextmanager
def importable(folder: Path) -> Iterator[None]:
    """`folder`'s modules importable by plain name for the duration; its helpers forgotten after."""
    folder = folder.resolve()
    before = set(sys.modules)
    entry = str(folder)
    added = entry not in sys.path
    if added:
        sys.path.insert(0, entry)
    try:
        yield
    finally:
        if added:  # else a single-package process (a test run), whose path keeps the folder
            with contextlib.suppress(ValueError):
                sys.path.remove(entry)
            for name in set(sys.modules) - before:
                file = getattr(sys.modules.get(name), "__file__", None)
                if file and Path(file).resolve().is_relative_to(folder):
                    del sys.modules[name]


def load_module(name: str, path: Path, root: Path) -> ModuleType:
    """Import `path` as `name` with its folder's helpers importable; any failure becomes an
    ImportError that says where in the package (`root`) it happened."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{_rel(path, root)}: cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import would (dataclasses look their module up)
    try:
        with importable(path.parent):
            spec.loader.exec_module(module)
    except Exception as exc:  # the author's code: any error is theirs, named with its line
        sys.modules.pop(name, None)
        raise ImportError(where(exc, root)) from exc
    sys.modules[name] = module  # the module itself stays, by its own name
    return module


def where(exc: BaseException, root: Path) -> str:
    """`file line N: Error: message`, the deepest line of the package (`root`) the error passed
    through; the exception alone when it never did."""
    cause = exc.__cause__ if exc.__cause__ is not None and _is_wrapper(exc) else exc
    said = f"{type(cause).__name__}: {cause}".rstrip(": ")
    if isinstance(cause, SyntaxError) and cause.filename:
        place = _place(Path(cause.filename), cause.lineno, root)
        if place:
            return f"{place}: SyntaxError: {cause.msg}"
    for frame in reversed(traceback.extract_tb(cause.__traceback__)):
        place = _place(Path(frame.filename), frame.lineno, root)
        if place:
            return f"{place}: {said}"
    return said


def _is_wrapper(exc: BaseException) -> bool:
    """pytest's "could not collect": the author's error is the one it was raised from."""
    return type(exc).__name__ == "CollectError"


def _place(file: Path, line: int | None, root: Path) -> str | None:
    try:
        rel = file.resolve().relative_to(root.resolve())
    except ValueError:
        return None
    return f"{rel} line {line}" if line else str(rel)


def _rel(path: Path, root: Path) -> str:
    return _place(path, None, root) or str(path)
