"""Reference solution for treasure hunt 1."""

# What Pool() imports on first use, named here so that the timing's zygote preloads it (t1 times
# each call in a fresh process; a fresh program pays these imports, ~10 ms a call, once).
import multiprocessing.pool
import multiprocessing.queues
import multiprocessing.synchronize  # noqa: F401
from multiprocessing import Pool


def partial_sum(start: int, stop: int) -> float:
    """Sum of i * 0.001 for i in [start, stop)."""
    return sum(i * 0.001 for i in range(start, stop))


def parallel_sum(n: int, chunks: int, workers: int = 2) -> float:
    """Split [0, n) into `chunks` contiguous pieces and sum them in a Pool."""
    size = -(-n // chunks) if n else 0
    pairs = [(min(c * size, n), min((c + 1) * size, n)) for c in range(chunks)]
    with Pool(workers) as pool:
        return float(sum(pool.starmap(partial_sum, pairs)))
