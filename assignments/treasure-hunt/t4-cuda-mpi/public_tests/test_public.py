"""Public tests for treasure hunt 4: run them with `python -m pytest -q public_tests` on a machine with a GPU."""

import numpy as np


def brute(n: int, a: int, c: int, m: int) -> int:
    """Σ value(i) for i in [0, n), the starter's `VALUE_SRC` in NumPy."""
    x = (np.arange(n, dtype=np.int64) * a + c) % m
    for _ in range(2):
        x ^= x >> 16
        x = (x * 0x45D9F3B) & 0xFFFFFFFF
    x ^= x >> 16
    return int((x % m).sum())


def test_small_sum(submission):
    """Ten values for a = 3, c = 1, m = 1000 (495, 145, 923, 84, 22, 358, 746, 101, 468, 830)."""
    assert submission.gpu_mpi_sum(n=10, a=3, c=1, m=1000) == 4172


def test_odd_size(submission):
    """An odd number of values (the ranks' ranges differ by one)."""
    args = {"n": 100_001, "a": 48271, "c": 11, "m": 2**31 - 1}
    assert submission.gpu_mpi_sum(**args) == brute(**args)


def test_result_is_an_int(submission):
    """The answer is a plain int."""
    assert type(submission.gpu_mpi_sum(n=1000, a=5, c=2, m=97)) is int
