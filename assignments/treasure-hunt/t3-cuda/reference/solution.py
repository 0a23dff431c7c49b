"""Reference solution for treasure hunt 3: values made and summed on the GPU."""

import numpy as np
from numba import cuda, int64


@cuda.jit(device=True)
def value(i, a, c, m):
    """Value i of the sequence (the starter's, unchanged)."""
    x = (a * i + c) % m
    x ^= x >> 16
    x = (x * 0x45D9F3B) & 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x45D9F3B) & 0xFFFFFFFF
    x ^= x >> 16
    return x % m


@cuda.jit
def block_sums(n, a, c, m, partial):
    """Block b writes the sum of its threads' values into partial[b]."""
    shared = cuda.shared.array(0, dtype=int64)  # blockDim.x int64s, sized at launch
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * cuda.blockDim.x + t
    shared[t] = value(i, a, c, m) if i < n else 0
    cuda.syncthreads()
    stride = cuda.blockDim.x // 2
    while stride > 0:
        if t < stride:
            shared[t] += shared[t + stride]
        cuda.syncthreads()
        stride //= 2
    if t == 0:
        partial[cuda.blockIdx.x] = shared[0]


def gpu_sum(n: int, a: int, c: int, m: int, threads_per_block: int = 128) -> int:
    """Σ value(i) for i in [0, n): `block_sums` on the GPU, the per-block sums added on the host."""
    tpb = int(threads_per_block)
    if tpb < 1 or tpb & (tpb - 1):
        raise ValueError("threads_per_block must be a power of two")
    if n <= 0:
        return 0
    blocks = (n + tpb - 1) // tpb
    partial = cuda.device_array(blocks, dtype=np.int64)
    block_sums[blocks, tpb, 0, tpb * 8](np.int64(n), np.int64(a), np.int64(c), np.int64(m), partial)
    return int(partial.copy_to_host().sum())
