"""Timed inputs for treasure hunt 4 (trusted side; timing runs only on a real GPU).

Every timed call sums 2²⁴–2²⁵ values, value i being `(a·i + c) mod m` put through a 32-bit
integer hash and taken mod m again (the starter's `VALUE_SRC`, t3's `value`), with parameters
drawn per call. Each rank makes the values of its own range on its GPU and MPI adds the partial
sums: only four integers reach the ranks and one int64 per rank crosses MPI, so the kernels are
what the clock sees. t4 1.0.0 summed `(a·i + c) mod m` itself, which a floor-sum answers in
O(log m) steps, and rank 0 made the values and scattered them through the host, which held the
reference near 2×: NumPy on both ranks with a token CUDA context would have been credited as
GPU work (docs/gpu-validation.md). The hash leaves nothing to do but make every value, and
answers are checked against the same values made with NumPy.
"""

from functools import lru_cache

import numpy as np

_CHUNK = 1 << 22


def values(i: np.ndarray, a: int, c: int, m: int) -> np.ndarray:
    """The starter's `value`, for an int64 array of indices (no step exceeds 2⁶³)."""
    x = (i * a + c) % m
    for _ in range(2):
        x ^= x >> 16
        x *= 0x45D9F3B
        x &= 0xFFFFFFFF
    x ^= x >> 16
    return x % m


@lru_cache(maxsize=64)
def expected(n: int, a: int, c: int, m: int) -> int:
    """Σ value(i) for i in [0, n), exactly, in chunks (cached: both sides get the same inputs)."""
    return sum(int(values(np.arange(lo, min(n, lo + _CHUNK), dtype=np.int64), a, c, m).sum())
               for lo in range(0, n, _CHUNK))


def draw(rng: np.random.Generator, n: int, m_low: int = 1) -> dict:
    """Parameters for n values: 0 <= a, c < m <= 2³¹ (so a·i + c fits in int64)."""
    m = int(rng.integers(m_low, 2**31 + 1))
    return {"n": n, "a": int(rng.integers(0, m)), "c": int(rng.integers(0, m)), "m": m}


def make_input(rng: np.random.Generator, workers: int) -> dict:
    return draw(rng, int(rng.integers(2**24, 2**25)), m_low=2**20)


def make_simulated_input(rng: np.random.Generator, workers: int) -> dict:
    """A practice run's profile on the CUDA simulator: a few blocks, a few seconds there."""
    return draw(rng, 2048)


def check(inputs: dict, result: object) -> str | None:
    if type(result) is not int:
        return "the sum is not an int"
    if result != expected(**inputs):
        return "the sum is wrong"
    return None
