"""The manifest loader names every problem by file, key and reason."""

import shutil
from pathlib import Path

import pytest

from runners import package
from tests.conftest import COURSE


def copy_t1(tmp_path: Path) -> Path:
    dest = tmp_path / "course" / "pkg"
    shutil.copytree(COURSE / "t1-multiprocessing", dest)
    return dest


def problems(root: Path) -> list[package.Problem]:
    with pytest.raises(package.PackageError) as err:
        package.load(root)
    return err.value.problems


def test_shipped_t1_loads() -> None:
    a = package.load(COURSE / "t1-multiprocessing")
    assert a.ref == "treasure-hunt/t1-multiprocessing"
    assert a.manifest.entry.function == "parallel_sum"
    assert a.scaling_workers == [1, 2]


def test_missing_manifest(tmp_path: Path) -> None:
    (p,) = problems(tmp_path)
    assert "assignment.toml" in p.reason


def test_bad_toml_is_named(tmp_path: Path) -> None:
    root = copy_t1(tmp_path)
    (root / "assignment.toml").write_text("slug = [unclosed")
    (p,) = problems(root)
    assert p.file == "assignment.toml" and "TOML" in p.reason


def test_every_bad_key_is_reported(tmp_path: Path) -> None:
    root = copy_t1(tmp_path)
    text = (root / "assignment.toml").read_text()
    text = text.replace('slug = "t1-multiprocessing"', 'slug = "Bad Slug"')
    text = text.replace('kind = "cpu"', 'kind = "quantum"')
    text = text.replace("speedup_full = 1.7", "speedup_full = 0.5")
    text += "\n[surprise]\nx = 1\n"
    (root / "assignment.toml").write_text(text)
    keys = {p.key for p in problems(root)}
    assert {"slug", "resources.kind", "scoring", "surprise"} <= keys


def test_missing_files_are_named(tmp_path: Path) -> None:
    root = copy_t1(tmp_path)
    shutil.rmtree(root / "reference")
    (root / "statement.md").unlink()
    (root / "hidden" / "timing.py").unlink()
    found = {(p.file, p.key) for p in problems(root)}
    assert ("reference", "files.reference") in found
    assert ("statement.md", "statement") in found
    assert ("hidden/timing.py", "timing.hook") in found


def test_paths_may_not_leave_the_package(tmp_path: Path) -> None:
    root = copy_t1(tmp_path)
    text = (root / "assignment.toml").read_text().replace(
        'statement = "statement.md"', 'statement = "../../etc/passwd"')
    (root / "assignment.toml").write_text(text)
    assert any("leaves the package" in p.reason for p in problems(root))


def test_gpu_kind_needs_gpus(tmp_path: Path) -> None:
    root = copy_t1(tmp_path)
    text = (root / "assignment.toml").read_text().replace('kind = "cpu"', 'kind = "gpu"', 1)
    (root / "assignment.toml").write_text(text)
    assert any("gpus" in p.reason for p in problems(root))


def test_resolve_by_ref_slug_and_path(tmp_path: Path) -> None:
    root = COURSE.parent
    assert package.resolve("treasure-hunt/t1-multiprocessing", root).manifest.slug == \
        "t1-multiprocessing"
    assert package.resolve("t1-multiprocessing", root).course == "treasure-hunt"
    assert package.resolve(str(COURSE / "t1-multiprocessing"), root).manifest.version
    with pytest.raises(package.PackageError, match="no such assignment"):
        package.resolve("nope", root)


def test_content_hash_changes_with_tests(tmp_path: Path) -> None:
    root = copy_t1(tmp_path)
    before = package.load(root).content_hash()
    (root / "hidden" / "test_hidden.py").write_text("def test_x():\n    pass\n")
    assert package.load(root).content_hash() != before
