"""Serial baseline for treasure hunt 2 (the speedup reference): no MPI, one process."""

import numpy as np


def parallel_sum(n: int) -> float:
    """One loop, one core."""
    return sum(i * 0.001 for i in range(n))


def scatter_sum(values: np.ndarray) -> float:
    """The whole array on one core."""
    return float(np.sum(values, dtype=np.float64))
