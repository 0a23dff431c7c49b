"""Treasure hunt 2: the sum of i * 0.001 for i in [0, n), computed by MPI ranks."""

import numpy as np
from mpi4py import MPI


def partial_sum(start: int, stop: int) -> float:
    """Sum of i * 0.001 for i in [start, stop)."""
    return sum(i * 0.001 for i in range(start, stop))


def parallel_sum(n: int) -> float | None:
    """Each rank sums its slice of [0, n); rank 0 returns the total, the others None."""
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()  # noqa: F841
    # TODO: this rank's slice is [rank * n // size, (rank + 1) * n // size);
    #       sum it with partial_sum, then comm.reduce(local, op=MPI.SUM, root=0)
    raise NotImplementedError("parallel_sum is not written yet")


def scatter_sum(values: np.ndarray) -> float | None:
    """Rank 0 scatters equal chunks of `values`; each rank sums its chunk; Reduce to rank 0."""
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()  # noqa: F841
    # TODO: chunk = np.empty(len(values) // size); comm.Scatter(send, chunk, root=0)
    #       (send is `values` on rank 0, None elsewhere), then comm.Reduce of the chunk sums
    raise NotImplementedError("scatter_sum is not written yet")
