"""Assignment packages on the server: reading them (folder or zip, every problem named), importing
one as a new version (validated on a runner before students get it), finding a course's
assignments, starter downloads. Their policy (deadline, quotas, scoring curve) is
services/grades/policies.py's."""

from __future__ import annotations

import functools
import io
import re
import tomllib
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session, joinedload

from runners.protocol import MANIFEST, SLUG_RE, Files, Manifest, archives, check_relpath, explain
from runners.protocol.archives import STORED_ARCHIVE_MAX
from server.models import (
    Assignment,
    AssignmentVersion,
    AuditLog,
    Course,
    RubricItem,
    Submission,
    User,
)
from server.services.packages import student_kit
from server.services.records import artifacts, jobs
from server.services.records.errors import Conflict, DomainError, Forbidden, Invalid, NotFound, TooLarge

ZIP_EPOCH = (2000, 1, 1, 0, 0, 0)
class PackageInvalid(Invalid):
    """The package has problems; `problems` lists each (file, key, reason)."""

    def __init__(self, problems: list[dict[str, str]]) -> None:
        super().__init__("; ".join(f"{p['file']}: {p['key']}: {p['reason']}" for p in problems))
        self.problems = problems


def safe_members(data: bytes, *, max_total: int = STORED_ARCHIVE_MAX) -> dict[str, bytes]:
    """A zip's regular files by path (runners/protocol/archives.py, the one reader); Invalid
    saying why it is refused."""
    try:
        return archives.members(data, max_total=max_total)
    except archives.UnsafeArchive as exc:
        raise Invalid(str(exc)) from exc


def package_upload(upload: BinaryIO, *, max_bytes: int) -> dict[str, bytes]:
    """An uploaded package zip's files (the API's import and the course page's alike): 413
    past `max_bytes`, unpacking to at most ten times that."""
    data = upload.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise TooLarge(f"package larger than {max_bytes} bytes")
    return safe_members(data, max_total=max_bytes * 10)


def _strip_common_root(files: dict[str, bytes]) -> dict[str, bytes]:
    """Accept zips of the package folder itself (one top folder) as well as of its content."""
    if MANIFEST in files:
        return files
    tops = {PurePosixPath(n).parts[0] for n in files}
    if len(tops) == 1:
        return {str(PurePosixPath(*PurePosixPath(n).parts[1:])): c for n, c in files.items()
                if len(PurePosixPath(n).parts) > 1}
    return files


def parse_manifest(files: dict[str, bytes]) -> Manifest:
    """The manifest, or PackageInvalid naming every problem (file, key, reason)."""
    if MANIFEST not in files:
        raise PackageInvalid([{"file": MANIFEST, "key": "", "reason": "missing"}])
    try:
        raw = tomllib.loads(files[MANIFEST].decode("utf-8"))
        manifest = Manifest.model_validate(raw)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PackageInvalid([{"file": MANIFEST, "key": "", "reason": f"not TOML: {exc}"}]) from exc
    except RecursionError as exc:  # tomllib parses nested arrays and tables recursively
        raise PackageInvalid([{"file": MANIFEST, "key": "",
                               "reason": "nested too deeply to be a manifest"}]) from exc
    except ValidationError as exc:
        # The files the manifest names (or their defaults) are told in the same round.
        raise PackageInvalid([{"file": MANIFEST, "key": ".".join(map(str, e["loc"])) or "(top)",
                               "reason": explain(e)} for e in exc.errors()]
                             + _missing_as_named(files, raw)) from exc
    problems = []
    f = manifest.files
    for key in ("starter", "public_tests", "hidden_tests", "baseline", "reference", "data"):
        # The runner reads these folders (and copies `data` into the sandbox): never outside.
        folder = getattr(f, key)
        try:
            if folder is not None:
                check_relpath(folder)
        except ValueError as exc:
            problems.append({"file": MANIFEST, "key": f"files.{key}", "reason": str(exc)})
    for key in ("starter", "baseline", "reference"):  # their files are written on the runner
        for name in files:
            if name.startswith(f"{getattr(f, key)}/"):
                try:
                    check_relpath(name.removeprefix(f"{getattr(f, key)}/"))
                except ValueError as exc:
                    problems.append({"file": name, "key": f"files.{key}", "reason": str(exc)})
    if problems:
        raise PackageInvalid(problems)
    problems = _missing(files, f, manifest.statement, manifest.entry.file)
    if problems:
        raise PackageInvalid(problems)
    return manifest


def _missing(files: dict[str, bytes], f: Files, statement: str | None,
             entry_file: str | None) -> list[dict[str, str]]:
    """The statement, each code folder's entry file, each test folder's tests, if missing."""
    problems = []
    needed = [(statement, "statement")]
    for key in ("starter", "baseline", "reference"):
        folder = getattr(f, key)
        if entry_file is None:  # the folder at least
            if not any(n.startswith(f"{folder}/") for n in files):
                problems.append({"file": folder, "key": f"files.{key}",
                                 "reason": "missing from the package"})
        else:
            needed.append((f"{folder}/{entry_file}", f"files.{key}"))
    for path, key in needed:
        if path is not None and path not in files:
            problems.append({"file": path, "key": key, "reason": "missing from the package"})
    for key in ("public_tests", "hidden_tests"):
        folder = getattr(f, key)
        if not any(n.startswith(f"{folder}/") and PurePosixPath(n).name.startswith("test_")
                   for n in files):
            problems.append({"file": folder, "key": f"files.{key}", "reason": "no test_*.py files"})
    return problems


def _missing_as_named(files: dict[str, bytes], raw: dict[str, Any]) -> list[dict[str, str]]:
    """`_missing` for a manifest that did not validate: what its tables still name."""
    try:
        f = Files.model_validate(raw.get("files", {}))
    except ValidationError:
        return []  # told among the manifest's own problems
    statement, entry = raw.get("statement", "statement.md"), raw.get("entry")
    entry_file = entry.get("file") if isinstance(entry, dict) else None
    return _missing(files, f, statement if isinstance(statement, str) else None,
                    entry_file if isinstance(entry_file, str) else None)


STATEMENT_MAX_BYTES = 1 << 20
"""The most of a statement a page shows (a package's statement is a page of Markdown)."""


def statement_of(root: Path, sha256: str, name: str) -> str:
    """A stored package's statement, read alone from its bundle (its other members, the hidden
    tests among them, are not unpacked), and kept once read: a bundle's hash names its content.
    "" where the bundle or the statement cannot be read (not kept: a restore may bring it)."""
    try:
        return _statement(root, sha256, name)
    except (KeyError, zipfile.BadZipFile, zlib.error, OSError, DomainError, ValueError):
        return ""


@functools.lru_cache(maxsize=128)
def _statement(root: Path, sha256: str, name: str) -> str:
    with zipfile.ZipFile(io.BytesIO(artifacts.read(root=root, sha256=sha256))) as zf:
        info = zf.getinfo(name)
        if info.file_size > STATEMENT_MAX_BYTES:
            raise ValueError(f"the statement is larger than {STATEMENT_MAX_BYTES} bytes")
        return zf.read(info).decode("utf-8", "replace")


def bundle(files: dict[str, bytes]) -> bytes:
    """A deterministic zip of the package (same files, same bytes, same hash)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=ZIP_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, files[name])
    return buf.getvalue()


def _start_rubric(session: Session, assignment: Assignment, manifest: Manifest) -> None:
    """The package's manual part, where the course has none yet (its staff's rubric is theirs:
    a new version of the package never overwrites it)."""
    part = manifest.manual
    if not part.rubric and not part.points:
        return
    if assignment.manual_points or session.scalar(
            select(RubricItem.id).where(RubricItem.assignment_id == assignment.id).limit(1)):
        return
    assignment.manual_points, assignment.manual_weight = part.points, part.weight
    session.add_all([RubricItem(assignment_id=assignment.id, group=e.group, title=e.title,
                                description=e.description, points=e.points, position=k)
                     for k, e in enumerate(part.rubric)])


def read_folder(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith(".pyc")}


def import_files(*, session: Session, actor: User, course: Course, files: dict[str, bytes],
                 artifacts_root: Path, role: str | None, next_version: bool = False,
                 shipped: bool = False) -> AssignmentVersion:
    """Import a package's files into a course; a new version when its content changed. A
    version some submission was graded under never changes: other files under its number are
    refused, or (`next_version`, the instructor's consent) imported as the next free number.
    `shipped`: a shipped course's package, whose check waits behind an instructor's own."""
    if role != "instructor":
        raise Forbidden("only the course's instructors import assignments")
    files = _strip_common_root(files)
    manifest = parse_manifest(files)
    assignment = session.scalar(select(Assignment).where(Assignment.course_id == course.id,
                                                         Assignment.slug == manifest.slug))
    data = bundle(files)
    if assignment is not None and (taken := _graded_under_other_files(
            session, assignment, manifest.version, artifacts.sha256_of(data))):
        number = _next_free(session, assignment, manifest.version)
        if not next_version:
            raise Conflict(
                f"version {manifest.version} of {manifest.slug} has other files, and {taken} "
                f"submission{'s were' if taken != 1 else ' was'} graded under it: nothing was "
                f"imported. Set version = \"{number}\" in {MANIFEST} (students' grades keep the "
                f"version they were graded under), or import it as {number}")
        if (already := _renumbered_before(session, assignment, files)) is not None:
            return already
        files = {**files, MANIFEST: _renumbered(files[MANIFEST], number)}
        manifest, data = parse_manifest(files), bundle(files)
    sha = artifacts.store(session=session, root=artifacts_root, data=data, kind="bundle")
    if assignment is None:
        assignment = Assignment(course_id=course.id, slug=manifest.slug, title=manifest.title)
        session.add(assignment)
        session.flush()
    current = assignment.current_version
    if current is not None and current.bundle_sha256 == sha:
        return current
    version = AssignmentVersion(assignment_id=assignment.id, version=manifest.version,
                                manifest=manifest.model_dump(mode="json", by_alias=True),
                                bundle_sha256=sha)
    session.add(version)
    session.flush()
    jobs.enqueue_validation(session=session, version=version, queue=manifest.resources.queue,
                            shipped=shipped)
    _start_rubric(session, assignment, manifest)
    if current is None or current.status != "ready":
        # A ready version keeps serving students until its successor validates (services/fleet/outcomes.py).
        assignment.title = manifest.title
        assignment.current_version_id = version.id
    session.add(AuditLog(actor_id=actor.id, action="assignment.import",
                         target=f"{course.slug}/{manifest.slug}",
                         detail={"version": manifest.version, "bundle": sha}))
    session.flush()
    return version


def _graded_under_other_files(session: Session, assignment: Assignment, number: str,
                              sha: str) -> int:
    """How many submissions were graded under a version of this number whose files differ."""
    ids = [v.id for v in session.scalars(select(AssignmentVersion).where(
        AssignmentVersion.assignment_id == assignment.id, AssignmentVersion.version == number,
        AssignmentVersion.bundle_sha256 != sha))]
    if not ids:
        return 0
    return session.scalar(select(func.count()).select_from(Submission).where(
        Submission.version_id.in_(ids))) or 0


def _next_free(session: Session, assignment: Assignment, number: str) -> str:
    """The number after `number` (its last part plus one) that no version of it has yet."""
    used = set(session.scalars(select(AssignmentVersion.version).where(
        AssignmentVersion.assignment_id == assignment.id)))
    parts = [int(x) for x in number.split(".")]
    while True:
        parts[-1] += 1
        candidate = ".".join(map(str, parts))
        if candidate not in used:
            return candidate


def _renumbered_before(session: Session, assignment: Assignment,
                       files: dict[str, bytes]) -> AssignmentVersion | None:
    """The version these files were imported as already, under a number of its own."""
    for v in session.scalars(select(AssignmentVersion).where(
            AssignmentVersion.assignment_id == assignment.id)):
        renumbered = {**files, MANIFEST: _renumbered(files[MANIFEST], v.version)}
        if artifacts.sha256_of(bundle(renumbered)) == v.bundle_sha256:
            return v
    return None


def _renumbered(manifest: bytes, number: str) -> bytes:
    """The manifest with its top-level `version` set to `number` (the rest as written)."""
    text = manifest.decode("utf-8")
    first_table = re.search(r"(?m)^\s*\[", text)
    head = text[:first_table.start()] if first_table else text
    new_head, n = re.subn(r"(?m)^(\s*version\s*=\s*)([\"'])[^\"'\n]*\2", rf'\g<1>"{number}"', head,
                          count=1)
    if n != 1:
        raise Invalid(f"{MANIFEST}: its version could not be renumbered; set it by hand")
    return (new_head + text[len(head):]).encode("utf-8")


def get(*, session: Session, course: Course, slug: str) -> Assignment:
    # Not a slug, not an assignment; and never a query (PostgreSQL refuses text with NUL in it).
    a = session.scalar(select(Assignment).options(joinedload(Assignment.current_version))
                       .where(Assignment.course_id == course.id, Assignment.slug == slug)) \
        if re.fullmatch(SLUG_RE, slug) else None
    if a is None or a.current_version is None:
        raise NotFound(f"no assignment {slug!r} in {course.slug}")
    return a


def of_course(*, session: Session, course: Course) -> list[Assignment]:
    return list(session.scalars(select(Assignment).where(Assignment.course_id == course.id)
                                .order_by(Assignment.slug)))


def offered(*, session: Session, course: Course) -> list[Assignment]:
    """The course's assignments that have a version students get (by slug)."""
    return [a for a in of_course(session=session, course=course) if a.current_version is not None]


def manifest_of(assignment: Assignment) -> Manifest:
    """The current version's manifest; Conflict when it no longer passes today's checks."""
    assert assignment.current_version is not None
    try:
        return Manifest.model_validate(assignment.current_version.manifest)
    except ValidationError as exc:  # stored before a rule was added (e.g. unsafe allowed_files)
        raise Conflict(f"the package of {assignment.slug!r} no longer passes the manifest checks "
                       f"({exc.errors()[0]['msg']}); its instructors must import it again") from exc


def student_files(*, assignment: Assignment, artifacts_root: Path) -> bytes:
    """A zip of what students may have: statement, starter, public tests (never hidden ones)."""
    m = manifest_of(assignment)
    assert assignment.current_version is not None
    members = safe_members(artifacts.read(root=artifacts_root,
                                          sha256=assignment.current_version.bundle_sha256))
    public = (f"{m.files.starter}/", f"{m.files.public_tests}/")
    keep = {n: c for n, c in members.items() if n == m.statement or n.startswith(public)}
    # Plain pytest runs the public tests on the student's machine (services/packages/student_kit.py),
    # unless the package brings its own conftest.
    keep.setdefault(f"{m.files.public_tests}/conftest.py", student_kit.conftest(m).encode())
    keep.setdefault("README.txt", student_kit.readme(m).encode())
    return bundle(keep)
