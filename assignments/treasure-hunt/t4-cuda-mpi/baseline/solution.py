"""Serial baseline for treasure hunt 4 (the speedup reference): a compiled loop on one CPU core.

Needs neither a GPU nor MPI. Under mpiexec every rank computes the whole sum on its own core
(only rank 0's answer is used), so the wall time is one core's.
"""

from numba import njit


@njit
def value(i, a, c, m):
    """The starter's `VALUE_SRC`, compiled for the CPU."""
    x = (a * i + c) % m
    x ^= x >> 16
    x = (x * 0x45D9F3B) & 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x45D9F3B) & 0xFFFFFFFF
    x ^= x >> 16
    return x % m


@njit
def serial_sum(n, a, c, m):
    total = 0
    for i in range(n):
        total += value(i, a, c, m)
    return total


def gpu_mpi_sum(n: int, a: int, c: int, m: int) -> int:
    """Σ value(i) for i in [0, n), one value after another."""
    return int(serial_sum(n, a, c, m)) if n > 0 else 0
