"""Practice runs in the engine: the public tests only, never a hidden one, a report headed
"Practice: not graded" with no points, and with `timed` one short timing at the top worker
count."""

from __future__ import annotations

from pathlib import Path

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


def test_a_profile_shows_both_pool_workers_busy_and_a_serial_loop_one() -> None:
    """One untimed call sampled from outside: t1's reference starts two pool workers, running
    for most of their lives, in the student's own lines; the serial baseline handed in as a
    solution runs in one process, with no worker and no balance to speak of. (The call takes
    0.15-0.2 s: a worker lives for 6-12 samples, and one that started late may find less of the
    work left: 1.0 and 0.38 of their lives once.)"""
    a = package.load(T1)
    r = grader.grade(a, package.code_of(a, "reference"), practice="tests", profile=True)
    p = r.profile
    assert p is not None and p.note is None, p
    workers = [w for w in p.processes if w.started_in_call]
    assert len(workers) == 2 and all(w.running > 0 for w in workers), p.processes
    assert sum(w.running for w in workers) / 2 >= 0.5, p.processes
    assert p.top and p.top[0].own and p.top[0].file.endswith("/solution.py"), p.top
    assert p.balance is not None and p.balance < 1.5, p.balance
    serial = grader.grade(a, package.code_of(a, "baseline"), practice="tests", profile=True)
    q = serial.profile
    assert q is not None and not any(w.started_in_call for w in q.processes), q.processes
    assert [w.running >= 0.5 for w in q.processes] == [True] and q.balance is None, q


@pytest.mark.mpi
def test_a_profile_shows_the_rank_that_waits_in_the_collective() -> None:
    """t2 with rank 0 summing three quarters of the range: rank 1 finishes early and waits in
    the allreduce for at least a third of the call (its line calls MPI); with a reduce to rank 0
    it is back in the harness, waiting, as long. Its own quarter shows as running: the window
    is the call as the runner waited for it, not the shorter time the harness measured."""
    a = package.load(COURSE / "t2-mpi")
    uneven = (Path(__file__).parent / "fixtures/t2-variants/uneven_72.py").read_text()
    uneven = uneven.replace("72 + 28 *", "75 + 25 *")
    for call, kind in (("comm.allreduce(local, op=MPI.SUM)", "in_mpi"),
                       ("comm.reduce(local, op=MPI.SUM, root=0)", "waiting")):
        src = uneven.replace("comm.reduce(local, op=MPI.SUM, root=0)", call)
        r = grader.grade(a, {"solution.py": src.encode()}, practice="tests", profile=True)
        p = r.profile
        assert r.verdict is Verdict.PASSED and p is not None and len(p.processes) == 2, r.summary
        busy, idle = sorted(p.processes, key=lambda w: -w.running)
        assert busy.running >= 0.6, p.processes  # the window holds a few ticks either side
        # (a third or more, mostly; 0.317 once, beside a dispatch wait of a third of the window)
        assert getattr(idle, kind) >= 1 / 4, (kind, p.processes)
        assert idle.running >= 0.1, p.processes  # its own quarter, inside the window too
        assert p.balance is not None and p.balance > 1.1, p.balance  # uneven (1.2-1.6 here)


@pytest.mark.mpi
def test_a_whole_program_is_profiled_as_one_run() -> None:
    """A script entry (tests/fixtures/script-mpi, its sum under `mpirun -n 2`): one whole run
    sampled from its sandbox's first process, both ranks running in the student's own lines."""
    a = package.load(Path(__file__).parent / "fixtures" / "script-mpi")
    r = grader.grade(a, package.code_of(a, "reference"), practice="tests", profile=True)
    p = r.profile
    assert r.verdict is Verdict.PASSED and p is not None and p.note is None, (r.summary, p)
    assert len(p.processes) == 2 and all(w.running >= 0.5 for w in p.processes), p.processes
    assert p.top and p.top[0].own and not any(f.name.startswith("process ") for f in p.top)


def test_a_thread_pools_threads_are_a_row_each_and_wait_on_their_reads() -> None:
    """threads-io's reference: 16 threads, each read waiting 10 ms on the record service. Each
    thread that ran the student's code is a row of its own, started in the call, mostly
    waiting; no load balance is given for workers that wait."""
    a = package.load(COURSE.parent / "parallel-python" / "threads-io")
    r = grader.grade(a, package.code_of(a, "reference"), practice="tests", profile=True)
    p = r.profile
    assert r.verdict is Verdict.PASSED and p is not None and p.note is None, (r.summary, p)
    threads = [w for w in p.processes if w.thread and w.started_in_call]
    assert len(threads) >= 4 and all(w.label.startswith("process 1 · thread ") for w in threads)
    assert sum(w.waiting for w in threads) / len(threads) >= 0.6, p.processes
    assert p.balance is None, p.balance
    assert any("fetch (solution.py)" in s.frames for s in p.flame), p.flame[:3]



def test_a_gpu_profile_on_the_simulator_names_the_kernel_and_says_it_is_the_simulator() -> None:
    """t3 on a CPU runner: the profile runs the hook's small simulator input, its host time
    split into the kernel the student's line launched, copies and host, and says plainly that
    it profiled the numba CUDA simulator, not a GPU."""
    a = package.load(COURSE / "t3-cuda")
    r = grader.grade(a, package.code_of(a, "reference"), practice="tests", profile=True)
    p = r.profile
    assert r.verdict is Verdict.PASSED and p is not None and p.gpu is not None, (r.summary, p)
    assert p.gpu.simulated and "simulator" in p.gpu.note and "not a GPU" in p.gpu.note
    assert [k.name for k in p.gpu.per_kernel] == ["block_sums"], p.gpu
    assert p.gpu.kernels >= 0.5 and abs(p.gpu.kernels + p.gpu.copies + p.gpu.host - 1) < 0.01
    assert len(p.processes) == 1 and p.cost_s is not None and p.cost_s > p.seconds
