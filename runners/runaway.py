"""How much runner time one grading's tests may take (`resources.tests_seconds`).

A submission that never finishes (an infinite loop, a fork bomb, a sleep, a deadlocked MPI rank)
ends only at a run's wall limit. Left alone, every test of a grading would wait for that limit in
turn (t1: 8 tests × 60 s), so two rules bound what one grading's tests cost:

    after the first test that exceeded its time limit, no later test is run;
    no test is started once the tests have spent `budget` seconds,

with budget = resources.tests_seconds, or TESTS_BUDGET_FACTOR × wall_seconds (at least
TESTS_BUDGET_MIN_S). A runaway submission's tests so take one wall limit and the tests before
it, and a slow one's about budget + wall_seconds. A test that is not
run keeps its weight and earns nothing: skipping cannot raise a score. The verdict is the one the
test that ran into its limit gave (`timeout`); timing never follows a test that did not pass.
"""

from __future__ import annotations

import time

from runners.protocol import Resources, Verdict

TESTS_BUDGET_FACTOR = 3
"""Tests of the shipped references take well under one wall limit together (10–40 s against
45–60 s); three leave room for a correct but slow submission."""
TESTS_BUDGET_MIN_S = 60
"""Packages with a short wall limit still get a minute for all their tests."""
IN_FLIGHT_WALLS = 4
"""A test started within the budget may call the submission several times, each call bounded by
one wall limit; a runaway call ends its test at the first."""
OUTER_SLACK_S = 60
"""Collection, the zygote's start and pytest's own time. Beyond budget, the test in flight and
this, the trusted test process itself is stopped (a platform error)."""


def tests_budget_s(resources: Resources) -> float:
    """Seconds all tests of one grading may take before the next one is not started."""
    if resources.tests_seconds is not None:
        return float(resources.tests_seconds)
    return float(max(TESTS_BUDGET_FACTOR * resources.wall_seconds, TESTS_BUDGET_MIN_S))


def process_limit_s(resources: Resources) -> float:
    """The trusted test process's own limit: the budget, one test in flight, and slack."""
    return tests_budget_s(resources) + IN_FLIGHT_WALLS * resources.wall_seconds + OUTER_SLACK_S


class TestClock:
    """The tests' running account, kept by the test process: what the next test may do."""

    __test__ = False  # not a pytest class

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self.started = time.monotonic()
        self.exceeded: str | None = None
        """The first test that ran into its time limit."""

    def ended(self, test: str, verdict: Verdict) -> None:
        """One test is over."""
        if verdict is Verdict.TIMEOUT and self.exceeded is None:
            self.exceeded = test

    def why_not(self) -> str | None:
        """Why the next test is not run (None: it runs)."""
        if self.exceeded is not None:
            return (f"not run: an earlier test ({self.exceeded}) exceeded its time limit, so "
                    "the tests after it were not run")
        spent = time.monotonic() - self.started
        if spent >= self.budget_s:
            return (f"not run: this grading's tests had spent their {self.budget_s:g} s "
                    f"(resources.tests_seconds) after {spent:.0f} s")
        return None
