"""Assignment packages: the manifest format, its loader, and problems named by file, key and reason."""

from __future__ import annotations

import hashlib
import re
import sys
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from runners.protocol import MANIFEST, Manifest
from runners.protocol.manifest import Files, explain

__all__ = ["MANIFEST", "Assignment", "Manifest", "PackageError", "Problem", "discover", "load",
           "resolve"]


class Problem(BaseModel):
    """One thing wrong with a package."""

    model_config = ConfigDict(frozen=True)

    file: str
    key: str
    reason: str

    def __str__(self) -> str:
        where = f"{self.file}: {self.key}" if self.key else self.file
        return f"{where}: {self.reason}"


class PackageError(Exception):
    """A package could not be loaded; `problems` names each reason."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems


class Assignment:
    """A loaded, validated package on disk."""

    def __init__(self, root: Path, manifest: Manifest) -> None:
        self.root = root
        self.manifest = manifest

    @property
    def course(self) -> str:
        return self.root.parent.name

    @property
    def ref(self) -> str:
        """`course/slug`, how users name it."""
        return f"{self.course}/{self.manifest.slug}"

    def folder(self, name: str) -> Path:
        return self.root / str(getattr(self.manifest.files, name))

    @property
    def hidden_dir(self) -> Path:
        return self.folder("hidden_tests")

    @property
    def public_dir(self) -> Path:
        return self.folder("public_tests")

    @property
    def data_dir(self) -> Path | None:
        return self.root / self.manifest.files.data if self.manifest.files.data else None

    @property
    def workers(self) -> int:
        """The allotment the scaling study tops out at: ranks for MPI/torchrun, else cores."""
        m = self.manifest
        return m.resources.ranks if m.launcher.kind != "python" else m.resources.cores

    @property
    def scaling_workers(self) -> list[int]:
        ws = sorted({w for w in self.manifest.scoring.scaling_workers if w <= self.workers})
        return ws or [self.workers]

    def content_hash(self) -> str:
        """sha256 over every file of the package (a bundle's identity)."""
        h = hashlib.sha256()
        for p in sorted(self.root.rglob("*")):
            if p.is_file() and "__pycache__" not in p.parts:
                h.update(str(p.relative_to(self.root)).encode() + b"\0" + p.read_bytes())
        return h.hexdigest()


def _loc(err_loc: tuple[int | str, ...]) -> str:
    return ".".join(str(x) for x in err_loc)


def load(root: Path) -> Assignment:
    """Load and check a package folder; raise PackageError naming every problem."""
    root = root.resolve()
    manifest_path = root / MANIFEST
    if not manifest_path.is_file():
        raise PackageError([Problem(file=str(root), key="", reason=f"no {MANIFEST} in the folder")])
    try:
        raw = tomllib.loads(manifest_path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PackageError([Problem(file=MANIFEST, key="", reason=f"not valid TOML: {exc}")]) from exc
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as exc:
        problems = [
            Problem(file=MANIFEST, key=_loc(e["loc"]) or "(top level)", reason=explain(e))
            for e in exc.errors()
        ]
        # The folders are named apart from the rest: a missing one is told in the same round.
        raise PackageError(problems + _folders_of_raw(root, raw)) from exc
    problems = _check_files(root, manifest)
    if problems:
        raise PackageError(problems)
    return Assignment(root, manifest)


def _folders_of_raw(root: Path, raw: dict[str, object]) -> list[Problem]:
    """The folders and files a manifest that did not validate still names (or their defaults)."""
    try:
        files = Files.model_validate(raw.get("files", {}))
    except ValidationError:
        return []  # named by the manifest's own problems
    statement = raw.get("statement", "statement.md")
    entry = raw.get("entry")
    entry_file = entry.get("file") if isinstance(entry, dict) else None
    return _check_folders(root, files, statement if isinstance(statement, str) else None,
                          entry_file if isinstance(entry_file, str) else None)


def _check_folders(root: Path, files: Files, statement: str | None,
                   entry_file: str | None) -> list[Problem]:
    """The statement and every folder exist; the code folders hold the entry file, the test
    folders tests; the hidden folder's helpers do not shadow Python's own modules."""
    problems: list[Problem] = []

    def need(rel: str, key: str, *, folder: bool) -> Path | None:
        p = root / rel
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            problems.append(Problem(file=MANIFEST, key=key, reason=f"'{rel}' leaves the package"))
            return None
        if not (p.is_dir() if folder else p.is_file()):
            kind = "folder" if folder else "file"
            problems.append(Problem(file=rel, key=key, reason=f"{kind} does not exist"))
            return None
        return p

    if statement is not None:
        need(statement, "statement", folder=False)
    for key in ("starter", "baseline", "reference"):
        d = need(getattr(files, key), f"files.{key}", folder=True)
        if d is not None and entry_file is not None and not (d / entry_file).is_file():
            problems.append(
                Problem(file=f"{getattr(files, key)}/{entry_file}", key=f"files.{key}",
                        reason=f"the {key} has no entry file '{entry_file}'")
            )
    for key in ("public_tests", "hidden_tests"):
        d = need(getattr(files, key), f"files.{key}", folder=True)
        if d is not None and not any(d.glob("test_*.py")):
            problems.append(Problem(file=getattr(files, key), key=f"files.{key}",
                                    reason="no test_*.py files"))
    hidden = root / files.hidden_tests
    if hidden.is_dir():
        problems += [Problem(file=f"{files.hidden_tests}/{name}", key="", reason=(
            f"named like Python's own module '{name[:-3]}': the hidden tests would import "
            "Python's instead; rename it")) for name in _shadowing(hidden)]
    if files.data:
        need(files.data, "files.data", folder=True)
    return problems


def _shadowing(folder: Path) -> list[str]:
    """Modules of `folder` named like Python's own: on the trusted side the hidden folder comes
    first on the import path (runners/runs/authored.py), where they would break what imports
    the standard library's, or be passed over for it."""
    return sorted(p.name for p in folder.glob("*.py") if p.stem in sys.stdlib_module_names)


def _check_files(root: Path, m: Manifest) -> list[Problem]:
    problems = _check_folders(root, m.files, m.statement, m.entry.file)
    if m.timing.enabled:
        hidden = root / m.files.hidden_tests
        if hidden.is_dir() and not (hidden / m.timing.hook).is_file():
            problems.append(Problem(file=f"{m.files.hidden_tests}/{m.timing.hook}",
                                    key="timing.hook", reason="timing hook module does not exist"))
    if m.launcher.kind == "python" and m.resources.ranks != 1:
        problems.append(Problem(file=MANIFEST, key="resources.ranks",
                                reason="ranks > 1 needs launcher.kind 'mpirun' or 'torchrun'"))
    if m.launcher.kind != "python" and m.resources.ranks > m.resources.cores * 4:
        problems.append(Problem(file=MANIFEST, key="resources.ranks",
                                reason="more than 4 ranks per allotted core"))
    if m.launcher.kind == "torchrun" and m.entry.style != "script":
        problems.append(Problem(file=MANIFEST, key="launcher.kind",
                                reason="torchrun runs script entries only (entry.style 'script')"))
    if m.entry.style == "script" and m.entry.function:
        problems.append(Problem(file=MANIFEST, key="entry.function",
                                reason="script entries are run as programs; remove entry.function"))
    if re.search(r"[^A-Za-z0-9._-]", m.entry.file):
        problems.append(Problem(file=MANIFEST, key="entry.file", reason="unsafe file name"))
    return problems


def discover(assignments_dir: Path) -> list[Assignment | PackageError]:
    """Every package under `assignments_dir/<course>/<slug>/`, loaded or with its problems."""
    found: list[Assignment | PackageError] = []
    for manifest in sorted(assignments_dir.glob(f"*/*/{MANIFEST}")):
        try:
            found.append(load(manifest.parent))
        except PackageError as exc:
            found.append(exc)
    return found


def resolve(ref: str, assignments_dir: Path) -> Assignment:
    """Find a package by `course/slug`, by a folder path, or by a unique slug."""
    as_path = Path(ref)
    if (as_path / MANIFEST).is_file():
        return load(as_path)
    candidate = assignments_dir / ref
    if (candidate / MANIFEST).is_file():
        return load(candidate)
    matches = list(assignments_dir.glob(f"*/{ref}/{MANIFEST}"))
    if len(matches) == 1:
        return load(matches[0].parent)
    reason = "matches several courses; name it as course/slug" if matches else "no such assignment"
    raise PackageError([Problem(file=ref, key="", reason=reason)])


def code_of(assignment: Assignment, role: str) -> dict[str, bytes]:
    """The files of the starter, baseline or reference folder."""
    root = assignment.folder(role)
    return {str(p.relative_to(root)): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}
