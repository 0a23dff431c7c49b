"""One sandbox for a grading's tests, a fresh child per test (runners.runs.zygote.Zygote): what a test
leaves behind (files, processes, IPC, keys, memory, the result file) never reaches the next one,
and a test that attacks the zygote only loses it its sandbox."""

from __future__ import annotations

import itertools
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runners import package
from runners.grading import grader
from runners.protocol import TestOutcome, Verdict
from runners.runs.failures import SubmissionFailure
from runners.runs.runconfig import RunConfig
from runners.runs.session import Session
from runners.runs.stage import Stage
from runners.runs.zygote import FreshCalls, Zygote, preload_modules
from runners.sandbox import Limits, create_executor
from runners.settings import get_settings
from tests.conftest import COURSE, FIXTURES

LEAVE = (Path(__file__).parent / "hostile" / "leave_state.py").read_bytes()
EVERY_PLACE = {"tmp", "work", "shm", "dev", "tmp-dir", "process", "sysv-shm", "keyring", "memory",
               "result-file"}

pytestmark = pytest.mark.slow
_n = itertools.count()


def config(stage: Stage, backend: str = "bwrap", extra_env: dict[str, str] | None = None
           ) -> RunConfig:
    settings = get_settings()
    code = stage.add_code(f"sub-{backend}-{next(_n)}", {"solution.py": LEAVE})
    return RunConfig(executor=create_executor(settings, backend), runtime_dir=settings.runtime_dir,
                     stage=stage, code_dir=code,
                     entry_file="solution.py", launcher="python", ranks=1,
                     limits=Limits(cpus=(0,), wall_s=20, memory_mb=512),
                     extra_env=extra_env or {})


@pytest.fixture
def zygote(stage: Stage) -> Iterator[Zygote]:
    z = Zygote(config(stage), ["numpy"])
    z.start()
    assert z.usable
    yield z
    z.discard()


def test_nothing_a_test_leaves_reaches_the_next(zygote: Zygote) -> None:
    first = zygote.session()
    first.start()
    assert first.call("found_now")[0] == []
    left = set(first.call("leave")[0])
    # keyrings may be refused by the host; everything else must have been left
    assert EVERY_PLACE - {"keyring"} <= left, left
    time.sleep(0.1)  # the result file is written after the call's reply
    assert set(first.call("found_now")[0]) == left  # the detector sees what it left
    pid, parent = first.call("me")[0]
    time.sleep(0.1)  # its thread writes the result file again after that reply
    first.close()
    assert zygote.usable
    second = zygote.session()
    second.start()
    assert second.call("found_now")[0] == []
    pid2, parent2 = second.call("me")[0]
    assert parent2 == parent and pid2 != pid  # forked by the same zygote: not a new sandbox
    second.close()
    assert zygote.usable


def test_a_test_cannot_reach_into_the_zygote(zygote: Zygote) -> None:
    s = zygote.session()
    s.start()
    assert s.call("reach_parent")[0] == []  # not dumpable: no memory, environment or files
    s.close()


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGSTOP])
def test_a_test_that_kills_or_stops_the_zygote_only_loses_the_sandbox(
        zygote: Zygote, signum: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Zygote, "RESET_S", 1.0)
    s = zygote.session()
    s.start()
    try:  # killing the zygote (the sandbox's main process) may end the test's child as well
        assert s.call("signal_parent", int(signum))[0] is True
    except SubmissionFailure:
        assert signum == signal.SIGKILL
    s.close()
    assert not zygote.usable  # discarded: the next test gets a new one
    assert zygote.exit_info is not None


def test_the_zygote_preloads_the_references_libraries_only() -> None:
    files = {"solution.py": b"import numpy as np\nfrom numba import njit, prange\n"
                            b"import helpers\nfrom . import local\nfrom mpi4py import MPI\n"
                            b"import torch.distributed\nimport numba.cuda\n"
                            b"def f():\n    import dask\n",
             "helpers.py": b"import os.path\n", "notes.txt": b"import secrets\n"}
    assert preload_modules(files) == ["numba", "numpy", "os.path"]


def test_no_zygote_where_strays_cannot_be_told_apart(stage: Stage) -> None:
    assert Zygote.suits(config(stage))
    assert not Zygote.suits(config(stage, "process"))  # no PID namespace: kill(-1) would hit us


def test_a_grading_whose_every_test_leaves_state_passes_them_all() -> None:
    """Through the grader: each test of the package imports the submission in a fresh child,
    which raises if an earlier test's state is visible."""
    a = package.load(FIXTURES / "redteam" / "sum1")
    report = grader.grade(a, {"solution.py": LEAVE}, with_timing=False)
    assert report.verdict is Verdict.PASSED, [t.message for t in report.tests]
    assert len(report.tests) == 3
    assert all(t.outcome is TestOutcome.PASSED for t in report.tests)


def test_a_plain_session_still_sees_its_own_state(stage: Stage) -> None:
    """The control: in one session, what a call leaves is there for the next call."""
    s = Session(config(stage))
    s.start()
    try:
        left = set(s.call("leave")[0])
        time.sleep(0.1)
        assert set(s.call("found_now")[0]) == left
    finally:
        s.close()


def test_a_test_that_crashes_reports_its_own_end_and_output(zygote: Zygote) -> None:
    s = zygote.session()
    s.start()
    with pytest.raises(SubmissionFailure) as failed:
        s.call("crash", 3)
    assert failed.value.verdict is Verdict.CRASHED
    assert "exited with status 3" in failed.value.message
    assert "bye from the crashing test" in failed.value.output
    s.close()
    assert not zygote.usable  # a test that ended badly: the next one gets a new sandbox


@pytest.mark.parametrize("zygote_serves", [True, False])
def test_fresh_calls_leave_nothing_for_the_next_call(stage: Stage, zygote_serves: bool) -> None:
    """A package's `[timing] fresh_calls`: each call in its own process, nothing of the last
    call's there (files, processes, IPC, memory). Forked by one zygote where one serves; a
    sandbox per call where none does (the simulator's environment rules the zygote out)."""
    cfg = config(stage) if zygote_serves else config(stage, extra_env={"NUMBA_ENABLE_CUDASIM": "1"})
    assert Zygote.suits(cfg) is zygote_serves
    with FreshCalls(cfg, ["numpy"]) as calls:
        pid, parent = calls.call("me")[0]
        left = set(calls.call("leave")[0])
        assert EVERY_PLACE - {"keyring"} <= left, left
        time.sleep(0.1)
        assert calls.call("found_now")[0] == []
        pid2, parent2 = calls.call("me")[0]
        if zygote_serves:  # forked by the same zygote (a sandbox per call numbers from 1 again)
            assert parent2 == parent and pid2 != pid
        assert calls.fresh_processes == 5  # four calls, and the next one's process ready
        assert calls.pids()  # the next call's sandbox is there to pin or freeze
    assert calls.pids() == set()


def test_a_kept_pool_is_never_there_for_a_timed_call() -> None:
    """t1's statement times the pool's creation. A solution that keeps its pool in a module
    global and answers wrongly whenever a call finds it (tests/hostile/pool_kept_probe.py): with
    t1's fresh calls every timed answer is right, so no timed call met a pool; the same package
    without them rejects the first timed call that did."""
    a = package.load(COURSE / "t1-multiprocessing")
    assert a.manifest.timing.fresh_calls
    probe = {"solution.py": (Path(__file__).parent / "hostile" / "pool_kept_probe.py").read_bytes()}
    fresh = grader.grade(a, probe)
    assert fresh.verdict is Verdict.PASSED and fresh.speedup is not None, fresh.summary
    assert fresh.speedup.repetitions >= 2  # timed calls after the warm-up, and after each other
    shared = package.Assignment(a.root, a.manifest.model_copy(update={
        "timing": a.manifest.timing.model_copy(update={"fresh_calls": False})}))
    kept = grader.grade(shared, probe)
    assert kept.verdict is Verdict.FAILED, kept.summary
    assert "timed run returned a wrong answer" in kept.summary
