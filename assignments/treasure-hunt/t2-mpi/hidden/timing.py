"""Timed inputs for treasure hunt 2 (trusted side): drawn per run, every answer checked."""

import numpy as np


def make_input(rng: np.random.Generator, workers: int) -> dict:
    return {"n": int(rng.integers(8_000_000, 9_000_000))}


def make_warmup_input(rng: np.random.Generator, workers: int) -> dict:
    """Each sandbox's untimed first call: MPI and the imports, not the seconds of summing."""
    return {"n": int(rng.integers(100_000, 200_000))}


def check(inputs: dict, result: object) -> str | None:
    n = inputs["n"]
    want = 0.001 * n * (n - 1) / 2
    if not isinstance(result, float) or abs(result - want) > 1e-9 * abs(want):
        return "the sum is wrong"
    return None
