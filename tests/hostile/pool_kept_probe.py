"""Treasure hunt 1's kept-pool cheat (tests/fixtures/cheats/t1_pool_kept.py) that tells on itself:
a call of the timed size (n ≥ 7,000,000, what t1's timing hook draws) answers wrongly whenever it
finds the pool an earlier call left, so a grading whose timed answers all pass proves that no
timed call saw an earlier one's pool. (A hidden test may call it several times in one process:
those calls are small, and a pool kept there is no one's business.)"""

from multiprocessing import Pool

_POOL = None


def partial_sum(start: int, stop: int) -> float:
    return sum(i * 0.001 for i in range(start, stop))


def parallel_sum(n: int, chunks: int, workers: int = 2) -> float:
    global _POOL
    found = _POOL is not None
    if not found:
        _POOL = Pool(workers)
    size = -(-n // chunks) if n else 0
    pairs = [(min(c * size, n), min((c + 1) * size, n)) for c in range(chunks)]
    told = found and n >= 7_000_000
    return float(sum(_POOL.starmap(partial_sum, pairs))) * (2.0 if told else 1.0)
