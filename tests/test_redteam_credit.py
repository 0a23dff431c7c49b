"""Red team for the speedup credit: right answers without the parallel work earn no
performance points (or wait for review), honest parallel solutions keep theirs. Whole gradings
of treasure hunts 1 and 2 against tests/fixtures/cheats; the figures behind the thresholds come
from `python -m bench.credit` (assignments/README.md)."""

from __future__ import annotations

import pytest

from runners import package
from runners.grading import grader
from runners.protocol import GradeReport, Verdict, timed_on_a_busy_node
from tests.apptainer import apptainer_backend  # noqa: F401  (a fixture)
from tests.conftest import COURSE, FIXTURES

pytestmark = pytest.mark.slow
CHEATS = FIXTURES / "cheats"
# Cases that run under apptainer too, where its image builds: the CPU time the rule reads comes
# from the run's cgroup, outside the container, there as well. One case per way the container
# could hide or lose CPU time from that reading (6-10 s a grading): a single process (the closed
# form), processes the submission spawns inside the container (the burner's spinners) and MPI
# ranks started inside it (idle ranks). The serial NumPy one-liner and the dressed-up pool give
# the rule the same kinds of readings (one busy process; a pool's workers), and the rule itself
# does not know the backend (tests/test_credit.py). Speedup cheats that rely on the sandbox (the
# core bound, the frozen idle side) and the honest side: tests/test_apptainer_backend.py.
ON_APPTAINER = pytest.mark.apptainer


@pytest.fixture
def grading_backend(request: pytest.FixtureRequest) -> str:
    """The backend the gradings of a case run on: bwrap (the default) or apptainer."""
    name = str(getattr(request, "param", "bwrap"))
    if name == "apptainer":
        request.getfixturevalue("apptainer_backend")
    return name


def graded(slug: str, fixture: str | None) -> GradeReport:
    a = package.load(COURSE / slug)
    files = package.code_of(a, "reference") if fixture is None else {
        "solution.py": (CHEATS / fixture).read_bytes()}
    r = grader.grade(a, files)
    assert r.verdict is Verdict.PASSED, r.summary  # every answer is right
    assert r.speedup is not None and r.credit is not None and r.scaling[-1].cpu is not None
    return r


@pytest.mark.parametrize(("slug", "fixture", "grading_backend"), [
    ("t1-multiprocessing", "t1_closed_form.py", "bwrap"),
    ("t1-multiprocessing", "t1_pool_dressing.py", "bwrap"),
    ("t1-multiprocessing", "t1_numpy_serial.py", "bwrap"),
    ("t1-multiprocessing", "t1_burner.py", "bwrap"),
    pytest.param("t2-mpi", "t2_idle_ranks.py", "bwrap", marks=pytest.mark.mpi),
    pytest.param("t1-multiprocessing", "t1_closed_form.py", "apptainer", marks=ON_APPTAINER),
    pytest.param("t1-multiprocessing", "t1_burner.py", "apptainer", marks=ON_APPTAINER),
    pytest.param("t2-mpi", "t2_idle_ranks.py", "apptainer", marks=[ON_APPTAINER, pytest.mark.mpi]),
], indirect=["grading_backend"])
def test_a_right_answer_without_parallel_work_earns_no_performance_points(
        slug: str, fixture: str, grading_backend: str) -> None:
    r = graded(slug, fixture)
    assert r.environment.backend == grading_backend
    assert r.performance_points == 0 and r.score == r.test_points == 60, r.summary
    assert r.credit is not None and r.credit.status in ("refused", "held"), r.credit
    cpu = r.scaling[-1].cpu
    assert cpu is not None
    if fixture != "t1_burner.py":  # the burner pads its CPU time (0.27-0.54 of the baseline's)
        assert cpu.work_ratio < 0.5, cpu  # it did far less work
    else:  # and its spinners' CPU time is read, wherever they run (the parent alone: ≈ 0.02)
        assert cpu.work_ratio > 0.1, cpu
    # One plain sentence with the figures, in the summary the CLI and the page show first.
    assert "of the baseline's work on" in r.credit.reason and "busy core" in r.credit.reason
    assert ("held for review" in r.summary) or (r.credit.reason in r.summary)


@pytest.mark.parametrize("fixture", [None, "t1_pool_oversubscribed.py"])
def test_honest_pools_keep_their_credit(fixture: str | None) -> None:
    r = graded("t1-multiprocessing", fixture)
    assert r.credit is not None
    if r.credit.status == "pending":
        # A busy host (CI, 2026-12-02): the points wait, and only because the figure says the
        # node stayed busy; never refused or held for the node's doing.
        assert timed_on_a_busy_node(r.speedup), r.speedup
        assert r.performance_points == 0 and "busy" in r.summary, r.summary
    else:
        assert r.credit.status in ("credited", "capped"), r.credit
    cpu = r.scaling[-1].cpu
    # Well above the rule's 0.5 and every cheat's 0.27 (assignments/README.md); not higher: a
    # grading whose baseline calls ran slow on a busy host measured 0.78 and 0.797 (CI, 2026-11-27).
    assert cpu is not None and cpu.work_ratio > 0.65 and cpu.parallelism > 1.2, cpu
    if r.credit.status != "pending" and r.speedup is not None and r.speedup.median > 1.1:
        assert r.performance_points > 0, r.summary  # (a shared 2-vCPU VM may lose a core)


def test_parallel_and_faster_per_core_is_held_for_review_not_refused() -> None:
    r = graded("t1-multiprocessing", "t1_numpy_pool.py")
    assert r.credit is not None and r.credit.status in ("held", "credited"), r.credit
    if r.credit.status == "held":
        assert r.performance_points == 0 and "review" in r.credit.reason


def test_the_seed_style_1024_thread_kernel_passes_under_the_simulator(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Each simulated CUDA thread is an OS thread: the run needs 1024 of them plus the harness.
    monkeypatch.setenv("PARAGRADE_GPU_MODE", "simulated")
    from runners.settings import get_settings

    get_settings.cache_clear()
    try:
        a = package.load(COURSE / "t3-cuda")
        r = grader.grade(a, {"solution.py": (CHEATS / "t3_seed_1024.py").read_bytes()})
    finally:
        get_settings.cache_clear()
    assert r.verdict is Verdict.PASSED, [t.message for t in r.tests if t.outcome != "passed"]
    assert r.environment.gpu_mode == "simulated"
