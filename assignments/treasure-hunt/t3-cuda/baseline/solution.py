"""Serial baseline for treasure hunt 3 (the speedup reference): one CPU core, no CUDA."""

from numba import njit


@njit
def serial_sum(n, a, c, m):
    total = 0
    for i in range(n):
        total += (a * i + c) % m
    return total


def gpu_sum(n: int, a: int, c: int, m: int, threads_per_block: int = 128) -> int:
    """A compiled loop over every value; `threads_per_block` is accepted and ignored."""
    return int(serial_sum(n, a, c, m)) if n > 0 else 0
