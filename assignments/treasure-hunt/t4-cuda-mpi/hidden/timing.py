"""Timed inputs for treasure hunt 4 (trusted side): drawn per run, every answer checked exactly."""

import numpy as np


def floor_sum(n: int, m: int, a: int, b: int) -> int:
    """Σ floor((a·i + b) / m) for i in [0, n), in O(log m) steps (exact integers)."""
    total = 0
    while True:
        if a >= m:
            total += n * (n - 1) // 2 * (a // m)
            a %= m
        if b >= m:
            total += n * (b // m)
            b %= m
        y_max = a * n + b
        if y_max < m:
            return total
        n, b = divmod(y_max, m)
        m, a = a, m


def expected(n: int, a: int, c: int, m: int) -> int:
    """Σ ((a·i + c) mod m) for i in [0, n): (a·i + c) − m·floor((a·i + c) / m), summed."""
    return a * n * (n - 1) // 2 + c * n - m * floor_sum(n, m, a, c)


def make_input(rng: np.random.Generator, workers: int) -> dict:
    m = int(rng.integers(2**20, 2**31 + 1))
    return {"n": int(rng.integers(40_000_000, 50_000_000)), "a": int(rng.integers(1, m)),
            "c": int(rng.integers(0, m)), "m": m}


def check(inputs: dict, result: object) -> str | None:
    if type(result) is not int:
        return "the sum is not an int"
    if result != expected(**inputs):
        return "the sum is wrong"
    return None
