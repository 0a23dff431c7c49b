"""Serial baseline for treasure hunt 1 (the speedup reference)."""


def parallel_sum(n: int, chunks: int, workers: int = 1) -> float:
    """One loop, one core; `chunks` and `workers` are accepted and ignored."""
    return sum(i * 0.001 for i in range(n))
