"""Serial baseline for the scaling study (the speedup reference): one process, the whole loop."""

MASK = (1 << 64) - 1


def term(i: int, key: int) -> int:
    """A 24-bit pseudo-random term (the splitmix64 finaliser of i xor key, top bits)."""
    z = i ^ key
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return (z ^ (z >> 31)) >> 40


def bounds(n: int, rank: int, size: int) -> tuple[int, int]:
    """The block partition the parallel version uses (the baseline itself sums one block)."""
    base, extra = divmod(n, size)
    start = rank * base + min(rank, extra)
    return start, start + base + (rank < extra)


def balanced_sum(n: int, key: int) -> int:
    """Σ term(i, key) for i in [0, n), in one loop (run without MPI: no ranks to share with)."""
    return sum(term(i, key) for i in range(n))
