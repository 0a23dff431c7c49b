"""Public tests for treasure hunt 4: run them with `paragrade test` (on a machine with a GPU)."""

import numpy as np


def brute(n: int, a: int, c: int, m: int) -> int:
    i = np.arange(n, dtype=np.int64)
    return int(((i * a + c) % m).sum())


def test_small_sum(submission):
    """Ten terms: (3·i + 1) mod 7 for i = 0 … 9."""
    assert submission.gpu_mpi_sum(n=10, a=3, c=1, m=7) == 26


def test_odd_size(submission):
    """An odd number of terms (the pieces cannot all be equal without padding)."""
    assert submission.gpu_mpi_sum(n=100_001, a=48271, c=11, m=2**31 - 1) == \
        brute(100_001, 48271, 11, 2**31 - 1)


def test_result_is_an_int(submission):
    """The answer is a plain int."""
    assert type(submission.gpu_mpi_sum(n=1000, a=5, c=2, m=97)) is int
