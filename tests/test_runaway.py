"""Runaway submissions (runners/grading/runaway.py): per-test limits calibrated from the reference, which
tests a timeout spares, the tests' budget; and a grading whose runaway ends at the calibrated
limit, not the package's wall limit."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from runners import package
from runners.grading import grader, runaway
from runners.grading.runaway import TEST_LIMIT_MIN_S, TestClock
from runners.protocol import Resources, TestOutcome, Verdict
from tests.conftest import FIXTURES

T = "hidden/test_hidden.py::"


def test_each_tests_limit_comes_from_the_reference_within_the_wall_limit() -> None:
    r = Resources(kind="cpu", cores=2, wall_seconds=60)
    limits = runaway.test_limits(r, {"a": 0.2, "b": 3.0, "c": 30.0})
    # 4 × 2 cores × the reference's seconds, at least TEST_LIMIT_MIN_S, at most the wall limit
    assert limits == {"a": TEST_LIMIT_MIN_S, "b": 24.0, "c": 60.0}
    assert "the least any test gets (the reference took 0.20 s" in runaway.limit_reason(
        limits["a"], 0.2, r)
    assert runaway.limit_reason(limits["b"], 3.0, r) == "24 s, 8 × the reference's 3.00 s on this test"
    assert runaway.limit_reason(limits["c"], 30.0, r) == "the package's wall limit, 60 s"
    assert runaway.test_limits(r, {}) == {}


def test_a_timeout_spares_only_the_tests_with_a_shorter_limit() -> None:
    clock = TestClock(budget_s=1000)
    assert clock.why_not(20.0) is None
    clock.ended("t1", Verdict.PASSED, 20.0)
    clock.ended("t2", Verdict.TIMEOUT, 20.0)
    clock.ended("t3", Verdict.TIMEOUT, 10.0)  # the first timeout decides
    assert clock.why_not(10.0) is None
    for limit in (20.0, 30.0, None):  # None: the package's wall limit, the longest
        why = clock.why_not(limit)
        assert why is not None and "an earlier test (t2) exceeded its time limit" in why
    uncalibrated = TestClock(budget_s=1000)
    uncalibrated.ended("t1", Verdict.TIMEOUT, None)
    assert uncalibrated.why_not(None) is not None and uncalibrated.why_not(10.0) is None


def test_no_test_starts_once_the_budget_is_spent() -> None:
    clock = TestClock(budget_s=0.05)
    assert clock.why_not(None) is None
    time.sleep(0.06)
    why = clock.why_not(None)
    assert why is not None and "had spent their 0.05 s" in why
    r = Resources(kind="cpu", cores=1, wall_seconds=4)
    assert runaway.tests_budget_s(r) == runaway.TESTS_BUDGET_MIN_S
    assert runaway.tests_budget_s(Resources(kind="cpu", cores=1, wall_seconds=60)) == 180
    assert runaway.tests_budget_s(Resources(kind="cpu", cores=1, wall_seconds=60,
                                            tests_seconds=45)) == 45


def test_a_runaway_ends_at_its_calibrated_limit(tmp_path: Path) -> None:
    """The package allows 40 s a run, its reference needed a few milliseconds a test: the loop
    is stopped at the least limit a test gets, and its message says which limit applied."""
    root = tmp_path / "sum1"
    shutil.copytree(FIXTURES / "redteam" / "sum1", root)
    toml = root / "assignment.toml"
    toml.write_text(toml.read_text().replace("wall_seconds = 4", "wall_seconds = 40"))
    a = package.load(root)
    reference = {"public_tests/test_public.py::test_ten": 0.01, f"{T}test_random": 0.02,
                 f"{T}test_medium": 0.05}
    loop = b"def total(n, workers=1):\n    while True:\n        pass\n"
    started = time.monotonic()
    r = grader.grade(a, {"solution.py": loop}, reference_test_s=reference)
    took = time.monotonic() - started
    assert r.verdict is Verdict.TIMEOUT
    timed_out = [t for t in r.tests if t.outcome is TestOutcome.FAILED]
    assert len(timed_out) == 1
    assert f"this test's limit: {TEST_LIMIT_MIN_S:g} s, the least any test gets" in \
        timed_out[0].message, timed_out[0].message
    assert all("not run: an earlier test" in t.message for t in r.tests if t not in timed_out)
    assert TEST_LIMIT_MIN_S <= took < TEST_LIMIT_MIN_S + 15  # not the package's 40 s


def test_a_filled_output_or_disk_cap_stops_every_later_test() -> None:
    clock = TestClock(budget_s=1000)
    clock.ended("t1", Verdict.PASSED, 20.0)
    clock.ended("t2", Verdict.OUTPUT_EXCEEDED, 20.0)
    for limit in (5.0, 20.0, None):  # whatever its limit, unlike a timeout
        why = clock.why_not(limit)
        assert why is not None and "an earlier test (t2) filled the output or disk" in why


def test_a_submission_that_fills_the_disk_holds_the_runner_for_one_test() -> None:
    """It writes until the work dir's cap stops it, in every test it gets: the first one that
    fills it ends the grading's tests (measured before: 8 tests, 185 s of a runner)."""
    a = package.load(FIXTURES / "redteam" / "sum1")
    fill = (b"def total(n, workers=1):\n"
            b"    i = 0\n"
            b"    while True:\n"
            b"        i += 1\n"
            b"        with open(f'fill-{i}.bin', 'wb') as f:\n"
            b"            f.write(b'x' * (1 << 20))\n")
    started = time.monotonic()
    r = grader.grade(a, {"solution.py": fill})
    took = time.monotonic() - started
    filled = [t for t in r.tests if t.verdict is Verdict.OUTPUT_EXCEEDED]
    assert r.verdict is Verdict.OUTPUT_EXCEEDED and len(filled) == 1, [
        (t.name, t.verdict, t.message[:80]) for t in r.tests]
    later = r.tests[r.tests.index(filled[0]) + 1:]
    assert all("filled the output or disk" in t.message for t in later), later
    assert r.score == 0 and took < 90, took  # the runaway bound, not one cap per test
