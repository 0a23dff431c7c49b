"""Practice runs in the engine: the public tests only, never a hidden one, a report headed
"Practice: not graded" with no points, and with `timed` one short timing at the top worker
count."""

from __future__ import annotations

import pytest

from runners import package
from runners.grading import grader
from runners.grading.practice import HEADLINE
from runners.protocol import GradeReport, Verdict
from tests.conftest import COURSE

pytestmark = pytest.mark.slow
T1 = COURSE / "t1-multiprocessing"


def _practice(role: str, practice: str) -> GradeReport:
    a = package.load(T1)
    return grader.grade(a, package.code_of(a, role), practice=practice)  # type: ignore[arg-type]


def _no_points_and_no_hidden_test(r: GradeReport) -> None:
    assert r.practice and r.summary.startswith(f"{HEADLINE} · "), r.summary
    assert (r.score, r.test_points, r.performance_points) == (0.0, 0.0, 0.0), r
    assert r.tests and not any(t.hidden or t.name.startswith("hidden/") for t in r.tests), [
        t.name for t in r.tests]


def test_a_practice_run_runs_the_public_tests_alone_and_earns_nothing() -> None:
    r = _practice("reference", "tests")
    assert r.verdict is Verdict.PASSED, r.summary
    _no_points_and_no_hidden_test(r)
    assert "public tests passed" in r.summary and r.speedup is None, r.summary
    starter = _practice("starter", "tests")
    assert starter.verdict is not Verdict.PASSED, starter.summary
    _no_points_and_no_hidden_test(starter)


def test_a_timed_practice_run_times_the_top_worker_count_once() -> None:
    a = package.load(T1)
    r = _practice("reference", "timed")
    assert r.verdict is Verdict.PASSED, r.summary
    _no_points_and_no_hidden_test(r)
    assert r.speedup is not None and [p.workers for p in r.scaling] == [max(a.scaling_workers)]
    assert any("one short timing at the top worker count" in n for n in r.notes), r.notes
