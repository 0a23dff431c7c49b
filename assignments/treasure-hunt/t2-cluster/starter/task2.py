"""Treasure hunt 2 on the cluster: the sum of i * 0.001 for i < N, split among the MPI ranks.

Run as `srun python task2.py N`; rank 0 alone prints `total: X`."""

import sys

from mpi4py import MPI

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
comm = MPI.COMM_WORLD
# TODO: this rank's share of [0, N), its partial sum, and comm.reduce to rank 0.
if comm.rank == 0:
    print("total: not computed yet", flush=True)
