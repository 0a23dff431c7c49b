"""Treasure hunt 4: Σ value(i) for i in [0, n), each MPI rank making and summing its share of the
values on its GPU.

Run by the grader as `mpiexec -n 2 python …`: every rank calls gpu_mpi_sum(n, a, c, m) with the
same arguments; rank 0's return value is the answer.
"""

from __future__ import annotations

import ctypes
import re

import cupy as cp
import numpy as np  # noqa: F401  (you will need it for host staging and int64 kernel arguments)
from mpi4py import MPI

THREADS = 256

# Given: value i of the sequence, as a CUDA device function. Keep it as it is (the grader makes
# the same values); put it in front of your kernel's source: cp.RawKernel(VALUE_SRC + r"""…""", …).
VALUE_SRC = r"""
__device__ long long value(long long i, long long a, long long c, long long m)
{
    long long x = (a * i + c) % m;
    x ^= x >> 16;
    x = (x * 0x45D9F3BLL) & 0xFFFFFFFFLL;
    x ^= x >> 16;
    x = (x * 0x45D9F3BLL) & 0xFFFFFFFFLL;
    x ^= x >> 16;
    return x % m;
}
"""

# TODO 1: a kernel `range_sum(lo, hi, a, c, m, out)` that adds value(i) for i in [lo, hi) into a
#         one-element accumulator: a grid-stride loop, a shared-memory tree reduction per block,
#         and one atomicAdd per block (on an unsigned long long: two's complement keeps int64
#         sums exact).


def _mpix_query_cuda_support() -> bool | None:
    """MPIX_Query_cuda_support() of the loaded MPI library (MPICH ≥ 4, Open MPI), if it has one."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if re.search(r"/libmpi\.so[.\d]*$", line)}
    for path in sorted(paths):
        fn = getattr(ctypes.CDLL(path), "MPIX_Query_cuda_support", None)
        if fn is not None:
            fn.restype, fn.argtypes = ctypes.c_int, []
            return bool(fn())
    return None


def cuda_aware_mpi() -> bool:
    """Whether MPI may be handed device pointers; when unsure, no (staging is always safe).

    Every rank gets the same answer (same library), so all take the same path.
    """
    query = getattr(MPI, "Query_cuda_support", None)  # only in some mpi4py versions
    if query is not None:
        try:
            return bool(query())
        except (NotImplementedError, MPI.Exception):
            pass
    try:
        found = _mpix_query_cuda_support()
        if found is not None:
            return found
    except OSError:
        pass
    info = MPI.COMM_WORLD.Get_info()  # MPI 4.1 memory allocation kinds
    try:
        kinds = info.Get("mpi_memory_alloc_kinds") or ""
    finally:
        info.Free()
    return any(k in ("cuda", "cuda:device") for k in kinds.split(","))


def gpu_mpi_sum(n: int, a: int, c: int, m: int) -> int | None:
    """The sum on rank 0 (return None, or anything, on the other ranks)."""
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()  # noqa: F841  (size: see TODO 2)
    cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
    # TODO 2: this rank's range: chunk = ceil(n / size), [rank·chunk, (rank+1)·chunk) cut at n
    #         (possibly empty). Launch your kernel on it: the partial sum, on the device.
    # TODO 3: comm.Reduce the partial sums to rank 0 (op=MPI.SUM): device buffers when
    #         cuda_aware_mpi() (synchronize the stream first), else through host memory.
    raise NotImplementedError("gpu_mpi_sum is not written yet")
