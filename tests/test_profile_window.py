"""A profile's window is the call itself: the ticks before the call reached any process (its
dispatch, late on a busy node) and after it returned (py-spy stopping late) are cut, and what the
student's own code waited for (a pool starting, a collective) stays. Built from py-spy's
speedscope records written here, so each tick's place is known."""

from __future__ import annotations

from runners.measure import profile
from runners.runs.launch import INSIDE_HARNESS, INSIDE_SUB

SOURCE = {f"{INSIDE_SUB}/solution.py": "def f(comm):\n    s = sum(range(9))\n"
                                        "    return comm.allreduce(s)\n"}
FRAMES = [
    {"name": "serve", "file": f"{INSIDE_HARNESS}/worker.py", "line": 40},  # between calls
    {"name": "f", "file": f"{INSIDE_SUB}/solution.py", "line": 2},  # summing
    {"name": "f", "file": f"{INSIDE_SUB}/solution.py", "line": 3},  # in the allreduce
    {"name": "Condition.wait", "file": "/usr/lib/python3.11/threading.py", "line": 1},
    {"name": "process 102", "file": "", "line": 0},  # py-spy's, for a process not in Python yet
]
HARNESS, SUM, MPI, POOL, STARTING = [0], [1], [2], [1, 3], [4]


def _recording(*threads: list[list[int]]) -> profile.Recording:
    """A recording of 1 s at 100 a second (0.4 s attaching, a 0.6 s call), a rank a thread."""
    return profile.Recording(rate=100, wall_s=0.6, data={
        "shared": {"frames": FRAMES},
        "profiles": [{"name": f'Process {100 + i} Thread {100 + i} "MainThread"', "samples": s}
                     for i, s in enumerate(threads)]})


def _profile(rec: profile.Recording, before: set[int] | None = None) -> profile.Profile:
    """The profile of `rec` whose processes 100 and 101 (the ranks) were there before the call."""
    return profile.summarize(rec, code_dir=INSIDE_SUB, source=SOURCE, seconds=0.3,
                             harness=INSIDE_HARNESS, before=before or {100, 101})


def _summary(rec: profile.Recording) -> list[tuple[int, float, float, float]]:
    return [(w.samples, w.running, w.waiting, w.in_mpi) for w in _profile(rec).processes]


def test_the_call_on_its_way_and_py_spy_stopping_late_are_cut() -> None:
    # Both ranks get the call 0.3 s into the window (a busy node's dispatch); rank 0 sums for
    # 0.3 s, rank 1 for 0.1 s and then waits for it in the allreduce; py-spy stops 0.05 s late.
    before = HARNESS * 65
    busy = before + [SUM] * 30 + [HARNESS] * 5
    idle = before + [SUM] * 10 + [MPI] * 20 + [HARNESS] * 5
    assert _summary(_recording(busy, idle)) == [(30, 1.0, 0.0, 0.0), (30, 0.333, 0.0, 0.667)]


def test_what_the_students_code_waits_for_stays_in_the_window() -> None:
    # A pool starting inside the student's call is its time: waiting, and kept.
    rank = HARNESS * 65 + [POOL] * 10 + [SUM] * 20 + [HARNESS] * 5
    assert _summary(_recording(rank)) == [(30, 0.667, 0.333, 0.0)]


def test_a_call_never_seen_keeps_the_whole_window() -> None:
    # Too short for a tick in the student's code: nothing to cut to; the window as it was.
    [(samples, running, waiting, _)] = _summary(_recording(HARNESS * 100))
    assert samples == int((0.6 + profile.LATE_S) * 100) + 2 and (running, waiting) == (0.0, 1.0)


def test_a_pool_worker_that_started_late_and_ran_as_long_is_in_balance() -> None:
    # The main process waits on its pool; worker 1 starts first and spends a third of its life
    # starting, worker 2 comes later and sums at once: each sums for 0.2 s, a balance of 1
    # (by their shares of their lives, 0.67 and 0.91, it would be 1.15).
    main = HARNESS * 65 + [POOL] * 30 + [HARNESS] * 5
    first, second = STARTING * 10 + [SUM] * 20, STARTING * 2 + [SUM] * 20
    p = _profile(_recording(main, first, second), before={100})
    workers = [w for w in p.processes if w.started_in_call]
    assert [(w.samples, w.running) for w in workers] == [(30, 0.667), (22, 0.909)]
    assert p.balance == 1.0


def test_workers_that_mostly_wait_get_no_balance() -> None:
    # threads-io's pool seen once: each thread ran a fifth of its call (a running share over the
    # old floor of 0.1) and waited the rest: no balance; waiting a third, one is given.
    main = HARNESS * 65 + [POOL] * 30 + [HARNESS] * 5
    p = _profile(_recording(main, [SUM] * 6 + [POOL] * 24, [SUM] * 3 + [POOL] * 27), before={100})
    assert [w.waiting for w in p.processes if w.started_in_call] == [0.8, 0.9]
    assert p.balance is None
    p = _profile(_recording(main, [SUM] * 20 + [POOL] * 10, [SUM] * 10 + [POOL] * 5), before={100})
    assert p.balance is not None and p.balance > 1
