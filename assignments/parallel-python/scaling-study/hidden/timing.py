"""Timed inputs for the scaling study (trusted side): a new key per call, answers checked exactly.

Strong scaling keeps the number of terms; weak scaling gives each rank the same share, so the
one-rank run and the k-rank run of k times as many terms should take the same time.
"""

import importlib.util
from pathlib import Path

import numpy as np

_spec = importlib.util.spec_from_file_location("scaling_terms", Path(__file__).with_name("terms.py"))
assert _spec is not None and _spec.loader is not None
terms = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(terms)

PER_RANK = 300_000


def make_input(rng: np.random.Generator, workers: int) -> dict:
    return {"n": int(rng.integers(560_000, 640_000)), "key": int(rng.integers(0, 2**62))}


def make_warmup_input(rng: np.random.Generator, workers: int) -> dict:
    """Each sandbox's untimed first call: a few thousand terms, not a whole timed call's."""
    return {"n": int(rng.integers(5_000, 10_000)), "key": int(rng.integers(0, 2**62))}


def make_weak_input(rng: np.random.Generator, workers: int) -> dict:
    return {"n": PER_RANK * workers + int(rng.integers(0, 1000)),
            "key": int(rng.integers(0, 2**62))}


def check(inputs: dict, result: object) -> str | None:
    if type(result) is not int:
        return "the sum is not an int"
    if result != terms.expected(inputs["n"], inputs["key"]):
        return "the sum is wrong"
    return None
