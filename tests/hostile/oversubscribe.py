"""Attack: use eight processes when one core is allotted, to beat the physical speedup bound."""
import os
from multiprocessing import Pool


def part(a, b):
    return sum(i * 0.001 for i in range(a, b))


def total(n, workers=1):
    try:
        os.sched_setaffinity(0, range(os.cpu_count() or 1))  # try to widen the allotment
    except OSError:
        pass
    k = 8
    step = -(-n // k) if n else 0
    with Pool(k) as pool:
        return float(sum(pool.starmap(part, [(min(i * step, n), min((i + 1) * step, n))
                                             for i in range(k)])))
