"""How much runner time one grading's tests may take: each test's time limit, and the tests'
budget together (`resources.tests_seconds`).

A submission that never finishes (an infinite loop, a fork bomb, a sleep, a deadlocked MPI rank)
ends only at a run's time limit. Left alone, every test of a grading would wait for the package's
wall limit in turn (t1: 8 tests × 60 s), so three rules bound what one grading's tests cost:

    each test's limit = min(wall_seconds, max(TEST_LIMIT_MIN_S,
                            TEST_LIMIT_FACTOR_PER_CORE × cores × the reference's seconds)),
      where the package's validation measured the reference on that test (else wall_seconds);
    after a test exceeded its limit, no later test whose limit is as long or longer is run;
    after a test filled its output or disk cap, no later test is run (a submission that fills
    the disk does it again in every test: 8 tests × 23 s of writing, measured);
    no test is started once the tests have spent `budget` seconds,

with budget = resources.tests_seconds, or TESTS_BUDGET_FACTOR × wall_seconds (at least
TESTS_BUDGET_MIN_S). A runaway submission so costs one test's limit and the tests before it. A
test that is not run keeps its weight and earns nothing: skipping cannot raise a score. The
verdict is the one the test that ran into its limit gave (`timeout`); timing never follows a test
that did not pass.
"""

from __future__ import annotations

import time

from runners.protocol import Resources, Verdict

TEST_LIMIT_MIN_S = 10.0
"""No test's limit is below this: a sandbox's start, imports and a JIT take seconds on a loaded
node, whatever the reference needed on the node that validated it."""
TEST_LIMIT_FACTOR_PER_CORE = 4
"""A test may take this many times the reference's seconds per allotted core: a correct serial
answer (cores × the reference's time) still passes, with room for a slower node."""
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


def test_limits(resources: Resources, reference_s: dict[str, float]) -> dict[str, float]:
    """Each test's time limit, from the reference's seconds on it at validation."""
    factor = TEST_LIMIT_FACTOR_PER_CORE * resources.cores
    return {name: round(min(float(resources.wall_seconds), max(TEST_LIMIT_MIN_S, factor * t)), 1)
            for name, t in reference_s.items() if t >= 0}


def limit_reason(limit: float, reference_s: float, resources: Resources) -> str:
    """Which calibrated limit (`test_limits`) applied to a test, in words."""
    factor = TEST_LIMIT_FACTOR_PER_CORE * resources.cores
    if limit >= resources.wall_seconds:
        return f"the package's wall limit, {resources.wall_seconds} s"
    if limit <= TEST_LIMIT_MIN_S:
        return (f"{limit:g} s, the least any test gets (the reference took {reference_s:.2f} s "
                "on it)")
    return f"{limit:g} s, {factor} × the reference's {reference_s:.2f} s on this test"


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
        self.exceeded_limit = float("inf")
        self.filled: str | None = None
        """The first test that filled its output or disk cap."""

    def ended(self, test: str, verdict: Verdict, limit: float | None) -> None:
        """One test is over (`limit`: its own, None: the package's wall limit)."""
        if verdict is Verdict.TIMEOUT and self.exceeded is None:
            self.exceeded, self.exceeded_limit = test, float("inf") if limit is None else limit
        if verdict is Verdict.OUTPUT_EXCEEDED and self.filled is None:
            self.filled = test

    def why_not(self, limit: float | None) -> str | None:
        """Why the next test, whose limit is `limit`, is not run (None: it runs)."""
        if self.filled is not None:
            return (f"not run: an earlier test ({self.filled}) filled the output or disk the "
                    "task allows, so no later test was run")
        if self.exceeded is not None and (float("inf") if limit is None else limit) \
                >= self.exceeded_limit:
            return (f"not run: an earlier test ({self.exceeded}) exceeded its time limit, so "
                    "the tests after it with as long a limit were not run")
        spent = time.monotonic() - self.started
        if spent >= self.budget_s:
            return (f"not run: this grading's tests had spent their {self.budget_s:g} s "
                    f"(resources.tests_seconds) after {spent:.0f} s")
        return None
