"""Treasure hunt 1: the sum of i * 0.001 for i in [0, n), computed in parallel."""

from multiprocessing import Pool  # noqa: F401  (you will need it)


def partial_sum(start: int, stop: int) -> float:
    """Sum of i * 0.001 for i in [start, stop)."""
    return sum(i * 0.001 for i in range(start, stop))


def parallel_sum(n: int, chunks: int, workers: int = 2) -> float:
    """Split [0, n) into `chunks` pieces and sum them with a Pool of `workers` processes."""
    # TODO: build the (start, stop) pairs, then Pool(workers).starmap(partial_sum, pairs)
    raise NotImplementedError("parallel_sum is not written yet")
