"""An instructor's first package, written from docs/instructors/packages.md alone: the guide's
files validate first time, `paragrade assignments new` writes the same, hidden helpers import by
plain name, and each planted mistake is named with its file and line under the check it broke."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runners import package
from runners.cli import app
from runners.grading import measuring, skeleton, validate
from runners.protocol import GradeReport
from tests.conftest import REPO_ROOT
from tests.server.reports import sample_report

GUIDE = REPO_ROOT / "docs" / "instructors" / "packages.md"
BLOCK = re.compile(r"\*\*`([^`]+)`\*\*\n\n```[a-z]*\n(.*?)```\n", re.S)


def guide_files() -> dict[str, str]:
    """Every file the guide's "Your first package" section shows, by its path."""
    text = GUIDE.read_text()
    section = text[text.index("## Your first package"):text.index("## The manifest")]
    return {path: body for path, body in BLOCK.findall(section)}


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, body in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body)
    return root


def problems(checks: list[validate.Check]) -> dict[str, list[str]]:
    return {c.name.split(" (")[0]: c.problems for c in checks if not c.ok}


def test_the_guide_shows_every_file_the_skeleton_writes() -> None:
    shown = guide_files()
    assert set(shown) == set(skeleton.FILES), "the guide and the skeleton name other files"
    for rel, body in skeleton.files("primes").items():
        assert shown[rel] == body, f"{rel}: the guide shows other text than the skeleton writes"
    assert "from expected import primes_below" in shown["hidden/test_hidden.py"]


@pytest.mark.slow
def test_the_guides_package_validates_first_time(tmp_path: Path) -> None:
    root = write(tmp_path / "my-course" / "primes", guide_files())
    checks = validate.validate(root)
    assert [c.name for c in checks if not c.ok] == [], problems(checks)
    assert not any(c.skipped for c in checks), [(c.name, c.skipped) for c in checks]
    names = [c.name.split(" (")[0] for c in checks]
    assert names[:2] == ["manifest and files", "reference passes"] and "timing hook" in names
    [overhead] = [c for c in checks if c.name.startswith("grading overhead")]
    assert overhead.figure is not None and overhead.figure < validate.OVERHEAD_GOAL_S
    assert "goal" not in overhead.name, overhead.name


@pytest.mark.slow
def test_a_package_whose_tests_start_slowly_is_told_its_overhead(tmp_path: Path) -> None:
    """Each hidden test pays 1.2 s before it runs (as a pool or a JIT started anew in every test
    would): validation still passes it, and names the tests as what to make lighter."""
    root = write(tmp_path / "primes", guide_files())
    tests = root / "hidden" / "test_hidden.py"
    tests.write_text("import time\n\nimport pytest\n\n\n@pytest.fixture(autouse=True)\n"
                     "def _slow_start():\n    time.sleep(1.2)\n\n\n" + tests.read_text())
    checks = validate.validate(root)
    assert [c.name for c in checks if not c.ok] == [], problems(checks)
    [overhead] = [c for c in checks if c.name.startswith("grading overhead")]
    assert overhead.figure is not None and overhead.figure >= 2.4, overhead
    assert "over the 2 s goal: make the tests (" in overhead.name, overhead.name
    overhead.message()  # as it crosses to the server (a name over 200 characters is refused)


def test_assignments_new_writes_the_skeleton_and_refuses_to_overwrite(tmp_path: Path) -> None:
    runner = CliRunner()
    target = tmp_path / "primes"
    done = runner.invoke(app, ["assignments", "new", str(target), "--title", "Primes, my way"])
    assert done.exit_code == 0, done.output
    written = {p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()}
    assert written == set(skeleton.FILES)
    a = package.load(target)
    assert (a.manifest.slug, a.manifest.title) == ("primes", "Primes, my way")
    (target / "statement.md").write_text("mine")
    again = runner.invoke(app, ["assignments", "new", str(target)])
    assert again.exit_code == 2 and "not empty: nothing was written" in again.output
    assert (target / "statement.md").read_text() == "mine"
    bad = runner.invoke(app, ["assignments", "new", str(tmp_path / "Bad_Name")])
    assert bad.exit_code == 2 and "cannot name a package" in bad.output
    assert not (tmp_path / "Bad_Name").exists()


def test_unknown_keys_get_did_you_mean_and_missing_folders_come_in_the_same_round(
        tmp_path: Path) -> None:
    files = skeleton.files("primes")
    files["assignment.toml"] = (files["assignment.toml"]
                                .replace("wall_seconds = 60", "wall_second = 60")
                                .replace("budget_s = 20", "budget = 20"))
    del files["baseline/solution.py"]
    root = write(tmp_path / "c" / "primes", files)
    with pytest.raises(package.PackageError) as caught:
        package.load(root)
    said = [str(p) for p in caught.value.problems]
    assert "assignment.toml: resources.wall_second: unknown key: did you mean 'wall_seconds'?" in said
    assert "assignment.toml: timing.budget: unknown key: did you mean 'budget_s'?" in said
    assert "baseline: files.baseline: folder does not exist" in said
    assert len(said) == 3, said


def test_a_helper_named_like_pythons_own_module_is_refused(tmp_path: Path) -> None:
    root = write(tmp_path / "c" / "primes", skeleton.files("primes"))
    (root / "hidden" / "random.py").write_text("X = 1\n")
    with pytest.raises(package.PackageError, match=r"hidden/random.py: named like Python's own "
                       r"module 'random'"):
        package.load(root)


def test_two_packages_helpers_of_one_name_never_answer_for_each_other(tmp_path: Path) -> None:
    """A runner's process loads many packages' hooks: each hook imports its own `expected`."""
    hooks = []
    for answer in (1, 2):
        root = write(tmp_path / "c" / f"p{answer}", skeleton.files(f"p{answer}"))
        (root / "hidden" / "expected.py").write_text(f"def primes_below(n):\n    return {answer}\n")
        hooks.append(measuring.load_hook(package.load(root)))
        assert "expected" not in sys.modules and str(root / "hidden") not in sys.path
    assert [h.check({"n": 10}, 1) for h in hooks] == [None, "the count is wrong"]
    assert [h.check({"n": 10}, 2) for h in hooks] == ["the count is wrong", None]


@pytest.mark.slow
def test_planted_mistakes_are_named_with_file_and_line_under_their_check(tmp_path: Path) -> None:
    files = skeleton.files("primes")
    files["hidden/test_hidden.py"] = files["hidden/test_hidden.py"].replace(
        "from expected import", "from expectd import")
    files["hidden/timing.py"] = files["hidden/timing.py"].replace(
        "def check(", "SCALE = 1 / 0\n\n\ndef check(")
    line = files["hidden/timing.py"].splitlines().index("SCALE = 1 / 0") + 1
    root = write(tmp_path / "c" / "primes", files)
    checks = validate.validate(root)
    found = problems(checks)
    assert found["reference passes"] == [
        "hidden/test_hidden.py: error: a test file could not be collected (assignment author's "
        "error): hidden/test_hidden.py line 3: ModuleNotFoundError: No module named 'expectd'"]
    assert found["timing hook"] == [f"hidden/timing.py line {line}: ZeroDivisionError: division "
                                    "by zero"]
    # The starter and the baseline are not judged by tests that cannot run (no false blame).
    skipped = {c.name: c.skipped for c in checks if c.skipped}
    assert set(skipped) == {"starter fails", "baseline is correct"}
    assert all("see \"reference passes\"" in why for why in skipped.values() if why)


@pytest.mark.slow
def test_a_broken_helper_is_named_with_its_own_file_and_line(tmp_path: Path) -> None:
    files = skeleton.files("primes")
    files["hidden/expected.py"] = files["hidden/expected.py"].replace("    if n < 3:",
                                                                      "    if n < 3", 1)
    broken = files["hidden/expected.py"].splitlines().index("    if n < 3") + 1
    root = write(tmp_path / "c" / "primes", files)
    found = problems(validate.validate(root))
    assert found["reference passes"] == [
        "hidden/test_hidden.py: error: a test file could not be collected (assignment author's "
        f"error): hidden/expected.py line {broken}: SyntaxError: expected ':'"]
    assert found["timing hook"] == [f"hidden/expected.py line {broken}: SyntaxError: "
                                    "expected ':'"]


def test_the_overhead_line_fits_a_check_however_large() -> None:
    """The check crosses to the server as a ValidationCheck (a name of 200 characters at most):
    a package hours over the goal in every part still sends its line, not a refused check."""
    r = GradeReport.model_validate(sample_report())
    phases = {"set-up": 100.4, "tests": 1006.1, "timing": 10000.5, "timed calls": 1.0,
              "start-up runs": 1000.0, "report": 100.3}
    r = r.model_copy(update={"environment": r.environment.model_copy(update={"phases": phases}),
                             "wall_time_s": 99999.0, "timed_time_s": 1.0})
    measured = validate._check_overhead(r, r.tests * 300, 0.0)
    assert "make the timed inputs' draws and checks lighter" in measured.name, measured.name
    tests_only = validate._check_overhead(None, r.tests * 300, 12345.6)
    assert "make the tests (41.15 s each) lighter" in tests_only.name, tests_only.name
    for c in (measured, tests_only):
        assert c.ok and c.message().name == c.name
