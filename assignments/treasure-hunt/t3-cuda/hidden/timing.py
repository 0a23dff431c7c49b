"""Timed inputs for treasure hunt 3 (trusted side; timing runs only on a real GPU).

Every timed call sums 2²⁴–2²⁵ values, value i being `(a·i + c) mod m` put through a 32-bit
integer hash and taken mod m again (`value` in the starter), with parameters drawn per call. The
values are made where they are summed: on the GPU by the kernel, on the CPU by the baseline's
serial loop. No input array crosses the PCIe link inside the timed window (t3 1.1.0 summed a
512 MiB host array, and the copy to the device cost as much as the serial loop). The hash is
what leaves no shortcut: t3 2.0.0 summed `(a·i + c) mod m` itself, which a floor-sum answers in
O(log m) steps, and on an H100 such an answer, with a token CUDA context for the driver to see,
was credited at 512× (docs/gpu-validation.md). Here every value must be made, and answers are
checked against the same values made with NumPy.
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


def draw(rng: np.random.Generator, n: int, m_low: int = 2**20) -> dict:
    """Parameters for n values: 0 <= a, c < m <= 2³¹ (so a·i + c fits in int64)."""
    m = int(rng.integers(m_low, 2**31 + 1))
    return {"n": n, "a": int(rng.integers(0, m)), "c": int(rng.integers(0, m)), "m": m}


def make_input(rng: np.random.Generator, workers: int) -> dict:
    return {**draw(rng, int(rng.integers(2**24, 2**25))), "threads_per_block": 256}


def make_simulated_input(rng: np.random.Generator, workers: int) -> dict:
    """A practice run's profile on the CUDA simulator: a few blocks, a few seconds there."""
    return {**draw(rng, 2048), "threads_per_block": 128}


def check(inputs: dict, result: object) -> str | None:
    if type(result) is not int:
        return "the sum is not an int"
    args = {k: inputs[k] for k in ("n", "a", "c", "m")}
    if result != expected(**args):
        return "the sum is wrong"
    return None
