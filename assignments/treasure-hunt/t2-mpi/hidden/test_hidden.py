"""Hidden tests for treasure hunt 2: inputs drawn per grading, answers computed here."""

import math

import numpy as np
import pytest


def expected(n: int) -> float:
    return 0.001 * n * (n - 1) / 2


def close(got: object, want: float, scale: float | None = None) -> bool:
    """A float within 1e-9 of `want`, relative to `scale` (the sum of magnitudes) if given."""
    tol = 1e-9 * (abs(want) if scale is None else scale) + 1e-12
    return isinstance(got, float) and abs(got - want) <= tol


# ---- parallel_sum(n): slices of a range, comm.reduce -------------------------------------------

def test_random_sizes(submission, rng):
    """parallel_sum: random n, most of them not a multiple of the rank count."""
    for _ in range(3):
        n = int(rng.integers(1, 50_000))
        assert close(submission.parallel_sum(n=n), expected(n))


def test_empty_range(submission):
    """parallel_sum: n = 0 sums to 0.0 (every slice is empty)."""
    assert submission.parallel_sum(n=0) == 0.0


def test_fewer_numbers_than_ranks(submission, rng):
    """parallel_sum: n no bigger than the rank count (some ranks get an empty slice)."""
    for n in sorted({1, int(rng.integers(1, submission.workers + 1)), submission.workers}):
        assert close(submission.parallel_sum(n=n), expected(n)), f"wrong for n = {n}"


def test_offset_slices(submission, rng):
    """parallel_sum: every number counted exactly once (no slice lost, none counted twice)."""
    p = submission.workers
    n = int(rng.integers(100, 200)) * p + int(rng.integers(1, max(p, 2)))
    assert close(submission.parallel_sum(n=n), expected(n))


@pytest.mark.weight(2)
def test_large_sum(submission, rng):
    """parallel_sum: a few million terms."""
    n = int(rng.integers(2_000_000, 3_000_000))
    assert close(submission.parallel_sum(n=n), expected(n))


# ---- scatter_sum(values): Scatter equal chunks, Reduce -----------------------------------------

def check_scatter(submission, values: np.ndarray) -> bool:
    want = math.fsum(values.tolist())
    return close(submission.scatter_sum(values), want, float(np.abs(values).sum()))


def test_scatter_random(submission, rng):
    """scatter_sum: random positive values, a random multiple of the rank count long."""
    values = rng.random(submission.workers * int(rng.integers(1, 5_000)))
    assert check_scatter(submission, values)


def test_scatter_one_value_per_rank(submission, rng):
    """scatter_sum: exactly one value per rank."""
    values = rng.uniform(1.0, 100.0, submission.workers)
    assert check_scatter(submission, values)


def test_scatter_exact_integers(submission, rng):
    """scatter_sum: whole numbers of both signs, summed exactly (a lost or doubled chunk shows)."""
    values = rng.integers(-1_000, 1_000, submission.workers * int(rng.integers(50, 500)))
    values = values.astype(np.float64)
    got = submission.scatter_sum(values)
    assert isinstance(got, float) and got == float(values.sum()), "the sum is off"


def test_scatter_signed_values(submission, rng):
    """scatter_sum: values of both signs (normally distributed)."""
    values = rng.normal(0.0, 10.0, submission.workers * int(rng.integers(1_000, 3_000)))
    assert check_scatter(submission, values)


@pytest.mark.weight(2)
def test_scatter_large(submission, rng):
    """scatter_sum: about a million values."""
    values = rng.random(submission.workers * int(rng.integers(400_000, 600_000)))
    assert check_scatter(submission, values)
