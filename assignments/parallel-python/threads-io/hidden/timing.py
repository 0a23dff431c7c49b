"""Timed inputs for threads-io (trusted side): 40 fresh keys per call, every record checked."""

import numpy as np
import paragrade_service


def make_input(rng: np.random.Generator, workers: int, n: int = 40) -> dict:
    tag = int(rng.integers(0, 2**40))
    return {"keys": [f"{tag:x}-{i}" for i in range(n)]}


def make_warmup_input(rng: np.random.Generator, workers: int) -> dict:
    """Each sandbox's untimed first call: a few keys, enough to start the threads and reach the
    service without a whole call's 40 waits."""
    return make_input(rng, workers, n=4)


def check(inputs: dict, result: object) -> str | None:
    want = [paragrade_service.record(k) for k in inputs["keys"]]
    if not isinstance(result, list) or len(result) != len(want):
        return "not one record per key"
    if result != want:
        return "records are wrong or out of order"
    return None
