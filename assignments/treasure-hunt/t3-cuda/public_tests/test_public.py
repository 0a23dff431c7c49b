"""Public tests for treasure hunt 3: `NUMBA_ENABLE_CUDASIM=1 python -m pytest -q public_tests` (small on the simulator)."""

import numpy as np


def brute(n: int, a: int, c: int, m: int) -> int:
    """Σ value(i) for i in [0, n), the starter's `value` in NumPy."""
    x = (np.arange(n, dtype=np.int64) * a + c) % m
    for _ in range(2):
        x ^= x >> 16
        x = (x * 0x45D9F3B) & 0xFFFFFFFF
    x ^= x >> 16
    return int((x % m).sum())


def test_small_sum(submission):
    """Ten values for a = 3, c = 1, m = 1000 (495, 145, 923, 84, 22, 358, 746, 101, 468, 830), in
    blocks of 32 threads."""
    assert submission.gpu_sum(n=10, a=3, c=1, m=1000, threads_per_block=32) == 4172


def test_result_is_an_int(submission):
    """The result is a plain int (exact, not a float)."""
    assert type(submission.gpu_sum(n=40, a=5, c=2, m=97, threads_per_block=32)) is int


def test_partial_last_block(submission):
    """300 values in blocks of 64: the last block is only partly full."""
    args = {"n": 300, "a": 48271, "c": 11, "m": 2**31 - 1}
    assert submission.gpu_sum(**args, threads_per_block=64) == brute(**args)
