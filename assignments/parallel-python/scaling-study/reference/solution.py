"""Reference solution for the scaling study: block partition of the loop, then an allreduce."""

from mpi4py import MPI

MASK = (1 << 64) - 1


def term(i: int, key: int) -> int:
    """A 24-bit pseudo-random term (the splitmix64 finaliser of i xor key, top bits)."""
    z = i ^ key
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return (z ^ (z >> 31)) >> 40


def bounds(n: int, rank: int, size: int) -> tuple[int, int]:
    """This rank's block of [0, n): sizes differ by at most one, the first n % size get one more."""
    base, extra = divmod(n, size)
    start = rank * base + min(rank, extra)
    return start, start + base + (rank < extra)


def balanced_sum(n: int, key: int) -> int:
    """Σ term(i, key) for i in [0, n): each rank sums its block; every rank gets the total."""
    comm = MPI.COMM_WORLD
    start, stop = bounds(n, comm.Get_rank(), comm.Get_size())
    local = sum(term(i, key) for i in range(start, stop))
    return int(comm.allreduce(local, op=MPI.SUM))
