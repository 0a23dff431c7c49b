"""Timed inputs for threads-io (trusted side): 40 fresh keys per call, every record checked."""

import numpy as np
import paragrade_service


def make_input(rng: np.random.Generator, workers: int) -> dict:
    tag = int(rng.integers(0, 2**40))
    return {"keys": [f"{tag:x}-{i}" for i in range(40)]}


def check(inputs: dict, result: object) -> str | None:
    want = [paragrade_service.record(k) for k in inputs["keys"]]
    if not isinstance(result, list) or len(result) != len(want):
        return "not one record per key"
    if result != want:
        return "records are wrong or out of order"
    return None
