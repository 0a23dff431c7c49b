"""Public tests for treasure hunt 1: run them with `python -m pytest -q public_tests`."""

import pytest


def expected(n: int) -> float:
    return 0.001 * n * (n - 1) / 2


def test_small_sum(submission):
    """Ten numbers in two chunks."""
    assert submission.parallel_sum(n=10, chunks=2, workers=2) == pytest.approx(0.045, rel=1e-9)


def test_result_is_a_float(submission):
    """The result is a plain float."""
    assert isinstance(submission.parallel_sum(n=100, chunks=4, workers=2), float)


def test_more_chunks_than_workers(submission):
    """Eight chunks on two workers."""
    got = submission.parallel_sum(n=1000, chunks=8, workers=2)
    assert got == pytest.approx(expected(1000), rel=1e-9)
