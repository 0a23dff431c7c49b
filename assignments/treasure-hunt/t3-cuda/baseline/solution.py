"""Serial baseline for treasure hunt 3 (the speedup reference): one CPU core, no CUDA."""

from numba import njit


@njit
def value(i, a, c, m):
    """The starter's `value`, compiled for the CPU."""
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


def gpu_sum(n: int, a: int, c: int, m: int, threads_per_block: int = 128) -> int:
    """A compiled loop over every value; `threads_per_block` is accepted and ignored."""
    return int(serial_sum(n, a, c, m)) if n > 0 else 0
