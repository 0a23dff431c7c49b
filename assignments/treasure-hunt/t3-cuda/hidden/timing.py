"""Timed inputs for treasure hunt 3 (trusted side; timing runs only on a real GPU).

2**21 float64 values (16 MiB): the arguments travel to the sandbox as base64 JSON inside the
timed window, and a frame much above ~40 MB is not sent within the grader's socket timeout.
"""

import numpy as np

N = 2**21


def make_input(rng: np.random.Generator, workers: int) -> dict:
    return {"values": rng.random(N), "threads_per_block": 256}


def check(inputs: dict, result: object) -> str | None:
    want = float(np.sum(inputs["values"]))
    if not isinstance(result, float) or abs(result - want) > 1e-9 * abs(want):
        return "the sum is wrong"
    return None
