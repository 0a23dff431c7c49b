"""The shipped treasure-hunt course: every package validates and every reference grades."""

from __future__ import annotations

import pytest

from runners import package
from runners.grading import grader, validate
from runners.nodes import hardware
from runners.protocol import Verdict
from tests.conftest import COURSE

pytestmark = pytest.mark.slow
SLUGS = ["t1-multiprocessing", "t2-mpi", "t3-cuda", "t4-cuda-mpi", "t5-ddp"]
"""The packages one node validates; t2-cluster needs two (tests/test_multinode.py)."""


def test_the_course_has_exactly_its_six_slugs() -> None:
    found = sorted(p.parent.name for p in COURSE.glob("*/assignment.toml"))
    assert found == sorted([*SLUGS, "t2-cluster"])


@pytest.mark.parametrize("slug", SLUGS)
def test_package_validates(slug: str) -> None:
    simulated = slug == "t3-cuda" and not hardware.gpu_present()
    # t3 under the simulator: the reference's full grading is one of the checks (no timing)
    checks = validate.validate(COURSE / slug, measure=simulated)
    bad = [f"{c.name}: {c.problems}" for c in checks if not c.ok]
    assert not bad, "\n".join(bad)  # a str: pytest shortens a list's repr to 240 characters
    ran = [c for c in checks if not c.skipped]
    if slug == "t4-cuda-mpi" and not hardware.gpu_present():
        assert all("GPU runner" in (c.skipped or "") for c in checks[1:])
    else:
        assert len(ran) >= 4
    if simulated:
        r = next(c.report for c in checks if c.name == "reference passes")
        assert r is not None and r.verdict is Verdict.PASSED, r and r.summary
        assert r.environment.gpu_mode == "simulated"
        assert r.speedup is None and r.performance_points == 0
        assert any("simulated: no speedup points" in n for n in r.notes)
        assert "simulated: no speedup points" not in r.summary  # said once, in its note


@pytest.mark.mpi
def test_t2_reference_grades_with_real_ranks() -> None:
    a = package.load(COURSE / "t2-mpi")
    r = grader.grade(a, package.code_of(a, "reference"))
    assert r.verdict is Verdict.PASSED, r.summary
    assert r.speedup is not None and [p.workers for p in r.scaling] == [1, 2]


def test_t4_says_it_needs_a_gpu_runner() -> None:
    if hardware.gpu_present():
        pytest.skip("this runner has a GPU")
    a = package.load(COURSE / "t4-cuda-mpi")
    r = grader.grade(a, package.code_of(a, "reference"))
    assert r.verdict is Verdict.PLATFORM_ERROR and r.verdict.fault == "platform"
    assert "needs a GPU runner" in r.summary
