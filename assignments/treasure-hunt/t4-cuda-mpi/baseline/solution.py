"""Serial baseline for treasure hunt 4 (the speedup reference): NumPy on one CPU core.

Needs neither a GPU nor MPI. Under mpiexec every rank computes the whole sum (only rank 0's
answer is used).
"""

import numpy as np

CHUNK = 1 << 22  # elements per step: bounded memory for any n


def gpu_mpi_sum(n: int, a: int, c: int, m: int) -> int:
    """Σ ((a·i + c) mod m) for i in [0, n), one chunk of indices at a time."""
    total = 0
    for start in range(0, n, CHUNK):
        i = np.arange(start, min(start + CHUNK, n), dtype=np.int64)
        total += int(((i * a + c) % m).sum())
    return total
