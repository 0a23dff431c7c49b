"""Where the serial baseline's timed calls run: on each core of the allotted set in turn.

A shared node slows one core at a time without saying so (shared/RUNTIME-NOTES.md: one vCPU at
0.53 of its best for tens of seconds, the steal counter at 0). Let the set's n cores run at
speeds v_1 … v_n (fractions of their best) while a speedup is timed. A serial baseline of work W
pinned to core j takes W / v_j; a submission that splits W statically over the n cores waits for
its slowest piece, W / (n · min v). Left to the kernel, the baseline's one thread sits on one core
or another by chance, and the figure follows it: from n · min v / max v (on the fast core) to n
(on the slow one). On two cores t2 measured 1.13× and 1.89× in the same minute.

The rule: the baseline's k-th timed call runs pinned to core k mod n of the set, and the
baseline's time is the mean over the cores of each core's median call,
T_b = W · mean_j (1 / v_j). Then

    S = T_b / T_s = n · min v · mean_j (1 / v_j)

depends on the set's speeds, not on which core is the slow one: (1, 0.53) and (0.53, 1) both give
1.53 for a static split; an even node gives n. A slow core still lowers S, since a static split
waits for it; what the node delivered is the capacity probe's to say (runners/measure/capacity.py: short
windows timed again, a figure measured under interference marked as such), not the placement's.

The baseline is the instructor's code, so pinning it takes nothing from the submission, whose
sandbox keeps the whole set. Where the sandbox's processes cannot be seen or pinned, the call is
recorded without a core and the baseline's time is a plain median, as before the rule.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np


class Rotation:
    """The core each of a baseline's timed calls takes, in turn over the set (None: one core)."""

    def __init__(self, cpus: Sequence[int]) -> None:
        self.cpus = tuple(cpus)
        self._next = 0

    def next(self) -> int | None:
        if len(self.cpus) < 2:
            return None
        core = self.cpus[self._next % len(self.cpus)]
        self._next += 1
        return core


def pin(pids: set[int] | None, core: int) -> bool:
    """Every thread of these processes onto `core`; False where they cannot be seen or pinned."""
    if not pids:
        return False
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:  # gone since it was listed
            continue
        for tid in tids:
            try:
                os.sched_setaffinity(int(tid), {core})
            except ProcessLookupError:
                continue
            except OSError:  # not ours to pin, or the core is outside its cpuset
                return False
    return True


def baseline_time(times: Sequence[float] | np.ndarray, cores: Sequence[int | None]) -> float:
    """The mean over cores of each core's median time; a plain median where cores are unknown."""
    strata = _strata(times, cores)
    if strata is None:
        return float(np.median(times))
    return float(np.mean([np.median(s) for s in strata]))


def bootstrap_times(times: Sequence[float] | np.ndarray, cores: Sequence[int | None],
                    rng: np.random.Generator, rounds: int) -> np.ndarray:
    """`rounds` bootstrap replicates of baseline_time, each core's calls resampled on their own."""
    strata = _strata(times, cores) or [np.asarray(times)]
    replicates: np.ndarray = np.mean(
        [np.median(s[rng.integers(0, len(s), (rounds, len(s)))], axis=1) for s in strata], axis=0)
    return replicates


def note(cores: Sequence[int | None]) -> str | None:
    """What the report says of where the baseline ran (None: it was not placed)."""
    placed = sorted({c for c in cores if c is not None})
    if len(placed) < 2:
        return None
    return (f"the baseline was timed on each of cores {', '.join(map(str, placed))} in "
            "turn (pinned); its time is the mean of each core's median, so the figure does not "
            "depend on which core the node slowed")


def _strata(times: Sequence[float] | np.ndarray, cores: Sequence[int | None]
            ) -> list[np.ndarray] | None:
    """Each core's calls, or None unless every call has a core and they used two or more."""
    known = [c for c in cores if c is not None]
    if len(cores) != len(times) or len(known) != len(cores) or len(set(known)) < 2:
        return None
    t = np.asarray(times, dtype=float)
    c = np.asarray(known)
    return [t[c == core] for core in sorted(set(known))]
