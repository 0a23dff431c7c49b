"""Hidden tests for treasure hunt 1: inputs drawn per grading, answers from the closed form."""

import pytest


def expected(n: int) -> float:
    return 0.001 * n * (n - 1) / 2


def close(got: object, n: int) -> bool:
    return isinstance(got, float) and got == pytest.approx(expected(n), rel=1e-9, abs=1e-12)


def test_random_sizes(submission, rng):
    """Sums of random sizes and chunk counts."""
    for _ in range(3):
        n, chunks = int(rng.integers(1, 50_000)), int(rng.integers(1, 33))
        assert close(submission.parallel_sum(n=n, chunks=chunks, workers=submission.workers), n)


def test_empty_range(submission):
    """n = 0 sums to zero."""
    assert submission.parallel_sum(n=0, chunks=3, workers=2) == 0.0


def test_more_chunks_than_numbers(submission, rng):
    """More chunks than numbers (some pieces are empty)."""
    n = int(rng.integers(2, 9))
    assert close(submission.parallel_sum(n=n, chunks=n + 5, workers=2), n)


def test_one_worker(submission, rng):
    """Still right with a single worker."""
    n = int(rng.integers(10_000, 20_000))
    assert close(submission.parallel_sum(n=n, chunks=4, workers=1), n)


@pytest.mark.weight(2)
def test_large_sum(submission, rng):
    """A few million terms."""
    n = int(rng.integers(2_000_000, 3_000_000))
    assert close(submission.parallel_sum(n=n, chunks=16, workers=submission.workers), n)
