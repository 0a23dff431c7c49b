"""Assignment packages: the manifest format, its loader, and problems named by file, key and reason."""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from runners.protocol import MANIFEST, Manifest

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
            Problem(file=MANIFEST, key=_loc(e["loc"]) or "(top level)", reason=e["msg"])
            for e in exc.errors()
        ]
        raise PackageError(problems) from exc
    problems = _check_files(root, manifest)
    if problems:
        raise PackageError(problems)
    return Assignment(root, manifest)


def _check_files(root: Path, m: Manifest) -> list[Problem]:
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

    need(m.statement, "statement", folder=False)
    for key in ("starter", "baseline", "reference"):
        d = need(getattr(m.files, key), f"files.{key}", folder=True)
        if d is not None and not (d / m.entry.file).is_file():
            problems.append(
                Problem(file=f"{getattr(m.files, key)}/{m.entry.file}", key=f"files.{key}",
                        reason=f"the {key} has no entry file '{m.entry.file}'")
            )
    for key in ("public_tests", "hidden_tests"):
        d = need(getattr(m.files, key), f"files.{key}", folder=True)
        if d is not None and not any(d.glob("test_*.py")):
            problems.append(Problem(file=getattr(m.files, key), key=f"files.{key}",
                                    reason="no test_*.py files"))
    if m.files.data:
        need(m.files.data, "files.data", folder=True)
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
