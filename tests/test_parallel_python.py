"""The shipped parallel-python course: every package validates, its reference grades with a
speedup, and a plausible wrong solution (tests/fixtures/parallel-python/SLUG/wrong.py) fails."""

from __future__ import annotations

import pytest

from runners import package
from runners.grading import grader, validate
from runners.measure import calibration
from runners.protocol import Verdict
from runners.settings import REPO_ROOT, get_settings

pytestmark = pytest.mark.slow
PYCOURSE = REPO_ROOT / "assignments" / "parallel-python"
WRONG = REPO_ROOT / "tests" / "fixtures" / "parallel-python"
SLUGS = sorted(p.parent.name for p in PYCOURSE.glob("*/assignment.toml"))


def test_the_course_ships_its_packages() -> None:
    assert {"numba-parallel", "dask", "joblib-sweep", "scaling-study", "slurm-array",
            "threads-io"} <= set(SLUGS)
    assert all((WRONG / slug / "wrong.py").is_file() for slug in SLUGS)


@pytest.mark.parametrize("slug", SLUGS)
def test_package_validates_and_its_reference_speeds_up(
        slug: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # numba-parallel pays import and JIT on both sides per block: 8 s would leave ~4 timed calls.
    monkeypatch.setenv("PARAGRADE_TIMING_BUDGET_S", "16" if slug == "numba-parallel" else "8")
    get_settings.cache_clear()
    # A reference timed on a busy node is timed again once it frees; one busy past this wait
    # keeps the check for later (NodeBusy), as the server's would: nothing here to judge then.
    monkeypatch.setattr(validate, "BUSY_WAIT_S", 60.0)
    try:
        # measure: the reference is graded in full (tests and speedup) as one of the checks
        checks = validate.validate(PYCOURSE / slug, measure=True)
    except calibration.NodeBusy as exc:
        pytest.skip(f"the node stayed busy: {exc}")
    finally:
        get_settings.cache_clear()
    speed = next(c for c in checks if c.name.startswith("reference speeds up"))
    bad = [f"{c.name}: {c.problems}" for c in checks if not c.ok and c is not speed]
    assert not bad, "\n".join(bad)  # a str: pytest shortens a list's repr
    assert not [c.name for c in checks if c.skipped]
    r = next(c.report for c in checks if c.name == "reference passes")
    assert r is not None and r.verdict is Verdict.PASSED, r and r.summary
    assert r.speedup is not None and [p.workers for p in r.scaling] == [1, 2]
    # On the 2-core runners these packages target, every reference clears scoring.speedup_min
    # (the "reference speeds up" check) in a quiet hour. In a noisy one only a pathology fails
    # here, a reference under 0.8 of that floor: a noisy hour once cut slurm-array's 1.41×
    # reference to 1.09× and 1.10× on CI, and dask's (1.1–1.6× here) to 0.88× and 0.84× with
    # no window short of cores (what the host's other tenants take of memory bandwidth, the
    # probe's CPU time cannot see). How far each reference clears its floor is the benchmarks'
    # to track (bench.speedup_repeatability).
    m = package.load(PYCOURSE / slug).manifest
    assert speed.ok or (speed.figure is not None and speed.figure > 0.8 * m.scoring.speedup_min), (
        speed.name, speed.problems, r.speedup.interference)
    # threads-io turned the probe off (its speedup is waiting overlapped): nothing probed or
    # re-timed, and the report says nothing of the node's cores; every other package is probed.
    assert (r.speedup.interference is None) == (not m.timing.probe), r.speedup.interference
    if m.timing.weak_scaling:
        assert [w.workers for w in r.weak_scaling] == [2] and r.weak_scaling[0].efficiency > 0


@pytest.mark.parametrize("slug", SLUGS)
def test_the_wrong_solution_does_not_pass(slug: str) -> None:
    a = package.load(PYCOURSE / slug)
    r = grader.grade(a, {a.manifest.entry.file: (WRONG / slug / "wrong.py").read_bytes()},
                     with_timing=False)
    assert r.verdict is not Verdict.PASSED, r.summary
    assert r.verdict.fault == "student" and r.score < r.max_score
