"""Treasure hunt 3: the sum of an array, by a shared-memory block reduction on the GPU."""

import numpy as np
from numba import cuda, float64  # noqa: F401  (float64: the shared array's dtype)


@cuda.jit
def block_sums(x, partial):
    """Block b writes the sum of its threads' elements of `x` into partial[b]."""
    # TODO: 1. shared = cuda.shared.array(0, dtype=float64)  (size given at launch)
    #       2. shared[t] = x[i] (0.0 when i >= x.size), i = blockIdx.x * blockDim.x + threadIdx.x
    #       3. cuda.syncthreads(); then the strided tree: stride = blockDim.x // 2, ..., 1:
    #          threads t < stride add shared[t + stride] into shared[t]; cuda.syncthreads()
    #       4. thread 0 writes shared[0] into partial[blockIdx.x]


def gpu_sum(values: np.ndarray, threads_per_block: int = 128) -> float:
    """Sum `values` with `block_sums` on the GPU; add the per-block sums on the host."""
    # TODO: blocks = ceil(n / threads_per_block); copy `values` with cuda.to_device;
    #       partial = cuda.device_array(blocks, dtype=np.float64);
    #       block_sums[blocks, threads_per_block, 0, threads_per_block * 8](x, partial);
    #       return float(partial.copy_to_host().sum())  (and 0.0 for an empty array)
    raise NotImplementedError("gpu_sum is not written yet")
