"""Property: whatever bytes reach the upload and import routes, the answer is never a 5xx."""

from __future__ import annotations

import zipfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.settings import REPO_ROOT
from tests.server.conftest import REFERENCE, World, zip_of

PACKAGE = REPO_ROOT / "assignments/treasure-hunt/t1-multiprocessing"
SUBMIT = "/api/courses/th/assignments/t1-multiprocessing/submissions"
IMPORT = "/api/courses/th/assignments/upload"
FUZZ = settings(max_examples=100, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
# One database is enough: the property is about parsing, not about the engine.
sqlite_only = pytest.mark.parametrize("engine", ["sqlite"], indirect=True)


def _zip(files: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    return zip_of(files, method)


PACKAGE_FILES = {p.relative_to(PACKAGE).as_posix(): p.read_bytes()
                 for p in sorted(PACKAGE.rglob("*"))
                 if p.is_file() and "__pycache__" not in p.parts}
VALID = {"submission": _zip({"solution.py": REFERENCE}), "package": _zip(PACKAGE_FILES),
         "stored submission": _zip({"solution.py": REFERENCE}, zipfile.ZIP_STORED)}


@st.composite
def damaged_zips(draw: st.DrawFn) -> bytes:
    """A valid zip cut short, or with a few of its bytes changed."""
    data = bytearray(VALID[draw(st.sampled_from(sorted(VALID)))])
    if draw(st.booleans()):
        return bytes(data[:draw(st.integers(0, len(data) - 1))])
    for _ in range(draw(st.integers(1, 4))):
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return bytes(data)


uploads = st.one_of(st.binary(max_size=4096), damaged_zips())


@st.composite
def manifests(draw: st.DrawFn) -> bytes:
    """Random text, or the real manifest with some lines replaced by random text."""
    if draw(st.booleans()):
        return draw(st.text(max_size=400)).encode("utf-8", "surrogatepass")
    lines = PACKAGE_FILES["assignment.toml"].decode().splitlines()
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(lines) - 1))
        lines[at] = draw(st.one_of(
            st.text(max_size=60),
            st.integers(1, 3000).map(lambda n: "nested = " + "[" * n + "]" * n),
            st.sampled_from(['a = "' + "x" * 2, "[[entry]]", "[entry]", 'slug = "../x"',
                             "deadline = 9999-12-31T23:59:59-12:00", "a = [" * 50,
                             'allowed_files = ["/etc/passwd"]', "cores = 1e999"])))
    return "\n".join(lines).encode("utf-8", "surrogatepass")


@sqlite_only
@FUZZ
@given(data=uploads, as_zip=st.booleans())
def test_submission_uploads_never_crash(world: World, data: bytes, as_zip: bool) -> None:
    name = "solution.zip" if as_zip else "solution.py"
    r = world.post(world.ada, SUBMIT, files={"files": (name, data)})
    assert r.status_code < 500, r.text


@sqlite_only
@FUZZ
@given(data=uploads)
def test_package_imports_never_crash(world: World, data: bytes) -> None:
    r = world.post(world.prof, IMPORT, files={"package": ("p.zip", data)})
    assert r.status_code < 500, r.text


@sqlite_only
@FUZZ
@given(manifest=manifests(), stored=st.booleans())
def test_random_manifests_never_crash(world: World, manifest: bytes, stored: bool) -> None:
    files = {**PACKAGE_FILES, "assignment.toml": manifest}
    r = world.post(world.prof, IMPORT, files={"package": (
        "p.zip", _zip(files, zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED))})
    assert r.status_code < 500, r.text
