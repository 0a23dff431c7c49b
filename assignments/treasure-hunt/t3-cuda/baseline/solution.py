"""Serial baseline for treasure hunt 3 (the speedup reference): one CPU core, no CUDA."""

import numpy as np
from numba import njit


@njit
def serial_sum(x):
    total = 0.0
    for i in range(x.size):
        total += x[i]
    return total


def gpu_sum(values: np.ndarray, threads_per_block: int = 128) -> float:
    """A compiled loop over the whole array; `threads_per_block` is accepted and ignored."""
    return float(serial_sum(np.ascontiguousarray(values)))
