"""Reference solution for treasure hunt 3."""

import numpy as np
from numba import cuda, float64


@cuda.jit
def block_sums(x, partial):
    """Block b writes the sum of its threads' elements of `x` into partial[b]."""
    shared = cuda.shared.array(0, dtype=float64)  # blockDim.x doubles, sized at launch
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * cuda.blockDim.x + t
    shared[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    stride = cuda.blockDim.x // 2
    while stride > 0:
        if t < stride:
            shared[t] += shared[t + stride]
        cuda.syncthreads()
        stride //= 2
    if t == 0:
        partial[cuda.blockIdx.x] = shared[0]


def gpu_sum(values: np.ndarray, threads_per_block: int = 128) -> float:
    """Sum `values` with `block_sums` on the GPU; add the per-block sums on the host."""
    tpb = int(threads_per_block)
    if tpb < 1 or tpb & (tpb - 1):
        raise ValueError("threads_per_block must be a power of two")
    n = len(values)
    if n == 0:
        return 0.0
    blocks = (n + tpb - 1) // tpb
    x = cuda.to_device(np.ascontiguousarray(values))
    partial = cuda.device_array(blocks, dtype=np.float64)
    block_sums[blocks, tpb, 0, tpb * 8](x, partial)
    return float(partial.copy_to_host().sum())
