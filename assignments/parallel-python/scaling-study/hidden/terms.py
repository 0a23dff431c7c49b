"""The terms of the sum, vectorised (trusted side): the same mix as the students' `term`."""

import numpy as np

C1, C2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def expected(n: int, key: int) -> int:
    """Σ term(i, key) for i in [0, n), exactly."""
    total = 0
    for start in range(0, n, 1 << 20):  # blocks keep memory small for large n
        z = np.arange(start, min(n, start + (1 << 20)), dtype=np.uint64) ^ np.uint64(key)
        z = (z ^ (z >> np.uint64(30))) * C1
        z = (z ^ (z >> np.uint64(27))) * C2
        z = z ^ (z >> np.uint64(31))
        total += int((z >> np.uint64(40)).sum(dtype=np.uint64))
    return total
