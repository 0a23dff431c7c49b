"""Red team: hostile submissions, each with the outcome the grader promises (DESIGN.md trust model).

Whole gradings run against a one-core fixture package (tests/fixtures/redteam/sum1); probes that
only need one sandbox run call tests/hostile/probe.py through a session. The containment cases
run on every sandboxing backend the suite can start here (`sandbox`): bwrap, and apptainer where
its image builds (tests/apptainer.py).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from runners import package
from runners.grading import grader
from runners.nodes import hardware
from runners.protocol import GradeReport, TestOutcome, Verdict
from runners.runs.failures import SubmissionFailure, SubmissionRaised
from runners.runs.session import Session
from tests.apptainer import apptainer_backend  # noqa: F401  (a fixture)
from tests.conftest import FIXTURES, SessionFactory

HOSTILE = Path(__file__).parent / "hostile"
PROBE = (HOSTILE / "probe.py").read_text()

pytestmark = pytest.mark.slow


@pytest.fixture(params=["bwrap", pytest.param("apptainer", marks=pytest.mark.apptainer)])
def sandbox(request: pytest.FixtureRequest, make_session: SessionFactory) -> SessionFactory:
    """`make_session` on one of the backends whose containment is promised alike."""
    if request.param == "apptainer":
        request.getfixturevalue("apptainer_backend")
    return functools.partial(make_session, backend=request.param)


@pytest.fixture(scope="module")
def sum1() -> package.Assignment:
    return package.load(FIXTURES / "redteam" / "sum1")


def grade(a: package.Assignment, hostile: str, **kw: object) -> GradeReport:
    report = grader.grade(a, {"solution.py": (HOSTILE / hostile).read_bytes()}, **kw)  # type: ignore[arg-type]
    assert report.verdict.fault == "student", report.summary
    return report


def no_leak(report: GradeReport) -> None:
    """Nothing of the hidden tests' source or expected values reaches the student."""
    text = json.dumps(report.model_dump(mode="json"))
    assert "SECRET_EXPECTED_MARKER" not in text and "987654.321" not in text
    assert "def want" not in text and "approx" not in text


# 1. timers ---------------------------------------------------------------------------------
def test_patched_timers_do_not_change_the_measurement(sum1: package.Assignment) -> None:
    r = grade(sum1, "timer_patch.py")
    assert r.verdict is Verdict.PASSED
    assert r.speedup is not None
    # A serial program on one core: whatever its clocks say, its measured time stays that of the
    # work (a fooled clock would read ≈ 0 s and a speedup in the hundreds). Bounds are generous:
    # timing noise on a shared 2-core machine is large.
    assert r.speedup.submission_median_s > 0.4 * r.speedup.baseline_median_s
    assert r.speedup.median < 2.5


# 2. result channel -------------------------------------------------------------------------
def test_forged_channel_messages_are_forbidden(sum1: package.Assignment) -> None:
    r = grade(sum1, "forge_channel.py")
    assert r.verdict is Verdict.FORBIDDEN
    assert r.performance_points == 0 and r.speedup is None
    assert all(t.outcome != TestOutcome.PASSED for t in r.tests if t.hidden)


# 3. fake report on stdout ------------------------------------------------------------------
def test_printed_fake_report_is_ignored(sum1: package.Assignment) -> None:
    r = grade(sum1, "fake_report.py")
    assert r.verdict is Verdict.FAILED
    assert r.score == 0 and r.speedup is None
    no_leak(r)


# 4. hidden tests and reference on disk -----------------------------------------------------
def test_hidden_tests_and_host_secrets_are_not_on_disk(sandbox: SessionFactory) -> None:
    found = sandbox(PROBE, wall_s=30).call("find_secrets_on_disk")[0]
    assert found == []


# 5. local services -------------------------------------------------------------------------
def test_no_network_not_even_loopback(sandbox: SessionFactory) -> None:
    ports = [6379, 5432, 5672, 8000, 22]
    # The services are really up on the host (else this test proves nothing).
    import socket

    socket.create_connection(("127.0.0.1", 6379), timeout=2).close()
    assert sandbox(PROBE).call("connect_local_services", ports)[0] == []


# 6. fork bomb ------------------------------------------------------------------------------
def live_in_namespace(ns: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if os.readlink(f"/proc/{pid}/ns/pid") == ns and state != "Z":
                found.append(int(pid))
        except OSError:
            pass  # gone, or a zombie
    return found


def test_fork_bomb_is_contained(sandbox: SessionFactory) -> None:
    s = sandbox(PROBE, wall_s=4, pids=64)
    ns = s.call("pid_namespace")[0]
    started = time.monotonic()
    with pytest.raises(SubmissionFailure) as err:
        s.call("fork_bomb")
    assert err.value.verdict in (Verdict.TIMEOUT, Verdict.CRASHED)
    assert time.monotonic() - started < 30
    s.close()
    assert live_in_namespace(ns) == [], "processes of the sandbox survived it"


# 7. memory bomb ----------------------------------------------------------------------------
def test_memory_bomb_is_memory_exceeded(sandbox: SessionFactory) -> None:
    s = sandbox(PROBE, memory_mb=256, wall_s=20)
    with pytest.raises(SubmissionFailure) as err:
        s.call("memory_bomb")
    assert err.value.verdict is Verdict.MEMORY_EXCEEDED


# 8. infinite loop --------------------------------------------------------------------------
def test_infinite_loop_times_out_in_a_grading(sum1: package.Assignment, tmp_path: Path) -> None:
    (tmp_path / "loop.py").write_text("def total(n, workers=1):\n    while True:\n        pass\n")
    started = time.monotonic()
    r = grader.grade(sum1, {"solution.py": (tmp_path / "loop.py").read_bytes()})
    assert r.verdict is Verdict.TIMEOUT
    assert r.score == 0
    # The first test that calls it runs into the wall limit; the later ones are not run, and
    # keep their weight (a test not run cannot raise a score).
    timed_out = [t for t in r.tests if t.outcome is TestOutcome.FAILED]
    not_run = [t for t in r.tests if "not run: an earlier test" in t.message]
    assert {t.verdict for t in timed_out + not_run} == {Verdict.TIMEOUT}
    assert len(timed_out) == 1 and not_run
    assert all(t.outcome is TestOutcome.SKIPPED and t.weight > 0 for t in not_run if t.hidden)
    assert len(timed_out) + len(not_run) == len(r.tests)
    wall = sum1.manifest.resources.wall_seconds
    assert time.monotonic() - started < wall + 20  # one wall limit, then set-up only


def test_a_slow_submission_stops_at_the_tests_budget(tmp_path: Path) -> None:
    """Each call within its wall limit, but the tests together over resources.tests_seconds:
    the tests not started by then are not run, and the grading's verdict is a timeout."""
    root = tmp_path / "sum1"
    shutil.copytree(FIXTURES / "redteam" / "sum1", root)
    toml = root / "assignment.toml"
    toml.write_text(toml.read_text().replace("wall_seconds = 4", "wall_seconds = 4\ntests_seconds = 1"))
    slow = ("import time\n\ndef total(n, workers=1):\n    time.sleep(1.2)\n"
            "    return sum(i * 0.001 for i in range(n))\n")
    r = grader.grade(package.load(root), {"solution.py": slow.encode()})
    assert r.verdict is Verdict.TIMEOUT and r.speedup is None
    ran = [t for t in r.tests if t.outcome is TestOutcome.PASSED]
    not_run = [t for t in r.tests if "not run: this grading's tests had spent their 1 s" in t.message]
    assert ran and not_run and len(ran) + len(not_run) == len(r.tests)
    assert r.test_points < r.max_score * 0.6  # the tests not run earned nothing


# 9. 10 GB of output ------------------------------------------------------------------------
def test_output_flood_is_cut(sandbox: SessionFactory) -> None:
    s = sandbox(PROBE, wall_s=60, output_bytes=4 << 20)
    started = time.monotonic()
    with pytest.raises(SubmissionFailure) as err:
        s.call("output_flood")
    assert err.value.verdict is Verdict.OUTPUT_EXCEEDED
    assert time.monotonic() - started < 30


def test_disk_flood_is_cut(make_session: SessionFactory) -> None:
    s = make_session(PROBE, wall_s=60, fsize_bytes=32 << 20, disk_bytes=32 << 20)
    with pytest.raises((SubmissionFailure, SubmissionRaised)) as err:
        s.call("disk_flood")
    if isinstance(err.value, SubmissionFailure):
        assert err.value.verdict in (Verdict.OUTPUT_EXCEEDED, Verdict.CRASHED)
    else:  # RLIMIT_FSIZE: the write fails with EFBIG inside the program
        assert "File too large" in err.value.message or "EFBIG" in err.value.message


# 10. more processes than cores -------------------------------------------------------------
def test_oversubscription_cannot_beat_the_core_bound(sum1: package.Assignment) -> None:
    r = grade(sum1, "oversubscribe.py")
    assert r.verdict is Verdict.PASSED
    assert r.speedup is not None
    assert r.speedup.median <= sum1.manifest.resources.cores * 1.1
    assert r.environment.core_set == [hardware.host_cpus()[0]]


# 10b. burning the CPU while the baseline is timed -------------------------------------------
def test_an_idle_submission_cannot_slow_the_baseline(sum1: package.Assignment) -> None:
    # Unfrozen, its spinning thread would share the one core with the baseline's timed calls
    # and double them (a speedup near 2 for a serial answer).
    r = grade(sum1, "idle_burner.py")
    assert r.verdict is Verdict.PASSED and r.speedup is not None
    assert r.speedup.median < 1.3, r.speedup


@pytest.mark.parametrize("freezer", [True, False])
def test_timed_sandboxes_overlap_only_when_the_idle_one_is_frozen(
        sum1: package.Assignment, monkeypatch: pytest.MonkeyPatch, freezer: bool) -> None:
    most, unfrozen_overlap = [0], [False]
    real_start, real_close, real_freeze = Session.start, Session.close, Session.freeze
    live: list[Session] = []

    def start(self: Session) -> None:
        if any(not other.frozen for other in live):
            unfrozen_overlap[0] = True
        live.append(self)
        most[0] = max(most[0], len(live))
        real_start(self)

    def close(self: Session) -> Any:
        if self in live:
            live.remove(self)
        return real_close(self)

    def freeze(self: Session, frozen: bool) -> bool:
        if not freezer:  # a test double of a backend without a cgroup freezer
            return False
        if not frozen and any(o is not self and not o.frozen for o in live):
            unfrozen_overlap[0] = True
        return real_freeze(self, frozen)

    monkeypatch.setattr(Session, "start", start)
    monkeypatch.setattr(Session, "close", close)
    monkeypatch.setattr(Session, "freeze", freeze)
    r = grader.grade(sum1, package.code_of(sum1, "reference"))
    assert r.verdict is Verdict.PASSED and r.speedup is not None and r.speedup.repetitions >= 3
    assert not unfrozen_overlap[0]
    assert most[0] == (2 if freezer else 1)
    assert any("timed in pairs" in note for note in r.notes) == freezer, r.notes


# 11. caching across runs -------------------------------------------------------------------
def test_nothing_survives_between_runs(sandbox: SessionFactory) -> None:
    first = sandbox(PROBE)
    assert first.call("plant", "answer=42")[0]  # it could write in its own run
    first.close()
    assert sandbox(PROBE).call("harvest")[0] == []


# 12. lazy result ---------------------------------------------------------------------------
def test_lazy_result_never_reaches_the_checker(sum1: package.Assignment) -> None:
    r = grade(sum1, "lazy_result.py")
    assert r.verdict is Verdict.CRASHED
    assert r.score == 0
    assert any("cannot return" in t.message for t in r.tests)


# 13. exiting before the tests --------------------------------------------------------------
def test_exit_zero_at_import_is_a_crash(sum1: package.Assignment) -> None:
    r = grade(sum1, "exit_early.py")
    assert r.verdict is Verdict.CRASHED
    assert r.test_points == 0


# 14. timed-run detection -------------------------------------------------------------------
def test_constant_answer_in_timed_runs_fails(sum1: package.Assignment) -> None:
    r = grade(sum1, "detect_timed.py")
    assert r.verdict is Verdict.FAILED
    assert r.performance_points == 0 and r.speedup is None
    assert "timed run" in r.summary


# 15. secrets in the environment ------------------------------------------------------------
def test_environment_holds_no_secrets(sandbox: SessionFactory,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARAGRADE_SECRET_KEY", "s3cret-value")
    monkeypatch.setenv("DATABASE_URL", "postgresql://u:pw@db/x")
    env = sandbox(PROBE).call("environment")[0]
    assert "s3cret-value" not in json.dumps(env) and "pw@db" not in json.dumps(env)
    assert not any(k.startswith(("PARAGRADE_", "AWS_", "DATABASE")) for k in env)
    assert set(env) <= {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONDONTWRITEBYTECODE",
                        "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                        "NUMBA_NUM_THREADS", "NUMBA_CACHE_DIR", "MPLCONFIGDIR", "HYDRA_LAUNCHER",
                        "UCX_LOG_LEVEL", "HWLOC_HIDE_ERRORS", "LC_CTYPE", "PWD",
                        "PYTHONPATH"}  # the submission's own folder (for its child processes)


# 16. writing outside the work dir ----------------------------------------------------------
def test_system_runtime_and_submission_are_read_only(sandbox: SessionFactory) -> None:
    assert sandbox(PROBE).call("write_outside")[0] == []


# 17. other processes -----------------------------------------------------------------------
def test_host_processes_are_invisible(sandbox: SessionFactory) -> None:
    cmdlines = sandbox(PROBE).call("other_processes")[0]
    assert not any("pytest" in c or "postgres" in c or "redis" in c for c in cmdlines)
    assert len(cmdlines) <= 4  # the sandbox's init (bwrap's, apptainer's), the harness, the probe
