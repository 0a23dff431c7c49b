"""Public tests for treasure hunt 2: `python -m pytest -q public_tests` runs them as one rank, `paragrade test` on MPI ranks."""

import numpy as np
import pytest


def expected(n: int) -> float:
    return 0.001 * n * (n - 1) / 2


def test_small_sum(submission):
    """Ten numbers shared between the ranks."""
    assert submission.parallel_sum(n=10) == pytest.approx(0.045, rel=1e-9)


def test_result_is_a_float(submission):
    """Rank 0 returns a plain float."""
    assert isinstance(submission.parallel_sum(n=100), float)


def test_uneven_split(submission):
    """A range that does not divide evenly between the ranks."""
    n = 1001 * submission.workers + 1
    assert submission.parallel_sum(n=n) == pytest.approx(expected(n), rel=1e-9)


def test_scatter_small(submission):
    """Four values per rank, scattered and reduced."""
    values = np.arange(4 * submission.workers, dtype=np.float64)
    assert submission.scatter_sum(values) == pytest.approx(float(values.sum()), rel=1e-12)
