"""Shared fixtures: paths, the shipped course, sandbox sessions over a stage."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runners import package
from runners.runs.runconfig import RunConfig
from runners.runs.session import Session
from runners.runs.stage import Stage
from runners.sandbox import Limits, create_executor
from runners.settings import REPO_ROOT, get_settings

# Timed runs get 2 s of the default 30 in tests (graders and runner processes alike), as the
# benches' tiny runs have long had: the tests check lenient bounds, not precision, and stop rules
# end clear figures sooner; bench/ measures with the defaults, and tests about a figure's
# precision set their own. (10 s until 2026-12-03, 4 s until 2026-12-04: the serial part passed
# whole at each; 1907 -> 1716 s at 4, and 1849 -> 1670 s at 2 with runners keeping a fresh
# calibration at their start.)
os.environ.setdefault("PARAGRADE_TIMING_BUDGET_S", "2")
# The host's calibration (runners/measure/calibration.py) is this test run's own: runners the
# tests start make it, gradings read it, and the checkout's var/ is left alone.
os.environ.setdefault("PARAGRADE_CALIBRATION_FILE", str(
    Path(tempfile.mkdtemp(prefix="paragrade-calibration-")) / "calibration.json"))
get_settings.cache_clear()

COURSE = REPO_ROOT / "assignments" / "treasure-hunt"
FIXTURES = Path(__file__).parent / "fixtures"


CONCURRENT = {
    # The server over its database: pages, API, LTI, security, migrations (no runner).
    "tests/server/test_api.py", "tests/server/test_board.py", "tests/server/test_course_people.py",
    "tests/server/test_credit_review.py", "tests/server/test_fuzz_uploads.py",
    "tests/server/test_guide.py", "tests/server/test_lti.py", "tests/server/test_migrations.py",
    "tests/server/test_package_versions.py", "tests/server/test_pages.py",
    "tests/server/test_readiness.py", "tests/server/test_regrade_requests.py",
    "tests/server/test_notices.py", "tests/server/test_late_days.py",
    "tests/server/test_report_frictions.py", "tests/server/test_hand_grading_frictions.py",
    "tests/server/test_retiming.py",
    "tests/server/test_schemathesis.py", "tests/server/test_security_accounts.py",
    "tests/server/test_upload_races.py", "tests/server/test_backup.py",
    "tests/server/test_upgrade.py", "tests/server/test_crashes.py",
    "tests/server/test_reference_pool.py", "tests/server/test_manual_grading.py",
    "tests/server/test_grading_pages.py", "tests/server/test_hidden_tests_shown.py",
    "tests/server/test_security_auth.py", "tests/server/test_security_bodies.py",
    "tests/server/test_security_fuzz.py", "tests/server/test_security_input.py",
    "tests/server/test_security_lti.py", "tests/server/test_security_runners.py",
    "tests/server/test_shipped_courses.py", "tests/server/test_similarity_runs.py",
    "tests/server/test_final_run_busy.py", "tests/server/test_security_numbers.py",
    "tests/server/test_teams.py", "tests/server/test_boundary.py",
    "tests/server/test_practice_api.py", "tests/server/test_final_runs_api.py",
    "tests/server/test_one_rule.py", "tests/server/test_statement.py",
    # Files, manifests and rules read on the trusted side.
    "tests/test_architecture.py", "tests/test_batchscript.py", "tests/test_containers.py",
    "tests/test_docs.py", "tests/test_gpu_kernels.py", "tests/test_package.py", "tests/test_paths.py",
    "tests/test_plugin_messages.py", "tests/test_points.py", "tests/test_profile_window.py",
    "tests/test_similarity.py",
    "tests/test_student_kit.py", "tests/test_testfork.py",
    "tests/test_timing_math.py",
}
"""Modules whose tests start no sandbox or runner and time nothing: their non-slow tests are
marked `concurrent` (a slow one only where it carries the mark itself), and scripts/test.sh runs
those on every core (pytest-xdist) before the rest runs alone, as timing needs. A module joins
only when none of its tests time anything, starts a sandbox, or looks machine-wide (pgrep, fixed
ports)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = item.path.relative_to(REPO_ROOT).as_posix()
        if module in CONCURRENT and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.concurrent)
    # The apptainer tests run last, in their order, the GPU image's last of all: their images
    # build meanwhile (below).
    items.sort(key=lambda item: (item.get_closest_marker("apptainer") is not None,
                                 item.get_closest_marker("gpu_image") is not None))


def pytest_collection_finish(session: pytest.Session) -> None:
    # The images' tests come late, the apptainer tests last; their builds (minutes from nothing)
    # start now, in the idle time of everything before them.
    from tests import apptainer, podman

    if any(item.get_closest_marker("apptainer") for item in session.items):
        # after the deployment images' build, which it starts
        apptainer.build_early(gpu=any(item.get_closest_marker("gpu_image") for item in session.items))
    elif any(item.get_closest_marker("images") for item in session.items):
        podman.build_images_early()


def _machine_busy_s() -> float:
    """Seconds every core of this machine has spent busy since boot (/proc/stat's first line)."""
    with open("/proc/stat") as fh:
        user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fh.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """With PARAGRADE_TEST_CPU=FILE, one line per test: its wall seconds and the cores the whole
    machine kept busy meanwhile (what tells a test that waits from one that works or times:
    docs/contributors/testing.md)."""
    record = os.environ.get("PARAGRADE_TEST_CPU")
    if not record:
        yield
        return
    t, busy = time.monotonic(), _machine_busy_s()
    yield
    wall = time.monotonic() - t
    with open(record, "a") as fh:
        fh.write(f"{item.nodeid}\t{wall:.1f}\t{(_machine_busy_s() - busy) / max(wall, 1e-3):.2f}\n")


def pytest_sessionfinish(session: pytest.Session) -> None:
    from tests import apptainer, podman

    apptainer.stop_early_build()
    podman.stop_early_build()


@pytest.fixture(scope="session")
def t1() -> package.Assignment:
    return package.load(COURSE / "t1-multiprocessing")


@pytest.fixture
def stage() -> Iterator[Stage]:
    s = Stage()
    yield s
    s.cleanup()


SessionFactory = Callable[..., Session]


@pytest.fixture(params=["bwrap", "process"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_session(stage: Stage) -> Iterator[SessionFactory]:
    """Start sessions of a Python source in the sandbox; all are closed at the end."""
    opened: list[Session] = []

    def factory(source: str, *, backend: str = "bwrap", cpus: tuple[int, ...] = (0,),
                wall_s: float = 20, memory_mb: int = 512, launcher: str = "python",
                ranks: int = 1, start: bool = True, **limits: int) -> Session:
        settings = get_settings()
        code = stage.add_code(f"c{len(opened)}", {"solution.py": source.encode()})
        cfg = RunConfig(executor=create_executor(settings, backend),
                        runtime_dir=settings.runtime_dir, stage=stage, code_dir=code,
                        entry_file="solution.py", launcher=launcher, ranks=ranks,
                        limits=Limits(cpus=cpus, wall_s=wall_s, memory_mb=memory_mb, **limits))
        session = Session(cfg)
        opened.append(session)
        if start:
            session.start()
        return session

    yield factory
    for s in opened:
        s.close()


SPIN_ALWAYS = (Path(__file__).parent / "hostile" / "spin_always.py").read_text()


def check_freezing(s: Session, wall_s: float) -> None:
    """A started session of SPIN_ALWAYS, frozen, spins no further (thread and child process
    alike), its wall limit waits, and it still closes at once."""
    def spun(seconds: float, *, frozen: bool) -> int:
        before = s.call("count")[0]
        s.freeze(frozen)
        time.sleep(seconds)
        s.freeze(False)
        return int(s.call("count")[0]) - int(before)

    free = spun(1.0, frozen=False)
    # Freezing and thawing may take a moment (an engine's API), spinning meanwhile: a short and
    # a long freeze differ by frozen time only.
    short, long = spun(0.2, frozen=True), spun(1.2, frozen=True)
    assert free > 0 and long - short < free / 10, (free, short, long)
    s.freeze(True)
    time.sleep(wall_s + 1)  # past the wall limit, all of it frozen
    s.freeze(False)
    assert s.call("count")[0] > 0
    s.freeze(True)
    started = time.monotonic()
    s.close()
    assert time.monotonic() - started < 5
