"""Hidden tests for the scaling study: inputs drawn per grading, answers computed here."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("scaling_terms", Path(__file__).with_name("terms.py"))
assert _spec is not None and _spec.loader is not None
terms = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(terms)


def key_of(rng) -> int:
    return int(rng.integers(0, 2**62))


def test_random_sums(submission, rng):
    """Random n and keys, most n not a multiple of the rank count."""
    for _ in range(3):
        n, key = int(rng.integers(1, 40_000)), key_of(rng)
        assert submission.balanced_sum(n=n, key=key) == terms.expected(n, key)


def test_empty_range(submission, rng):
    """n = 0 sums to 0 (every block is empty)."""
    assert submission.balanced_sum(n=0, key=key_of(rng)) == 0


def test_fewer_terms_than_ranks(submission, rng):
    """n no bigger than the rank count: some ranks have an empty block."""
    for n in sorted({1, submission.workers}):
        key = key_of(rng)
        assert submission.balanced_sum(n=n, key=key) == terms.expected(n, key), f"n = {n}"


def test_result_is_an_int(submission, rng):
    """The total is a plain, exact int."""
    assert type(submission.balanced_sum(n=1000, key=key_of(rng))) is int


def test_blocks_are_balanced(submission, rng):
    """bounds(): contiguous blocks covering [0, n) once, sizes differing by at most one."""
    for _ in range(6):
        n, size = int(rng.integers(0, 10_000)), int(rng.integers(1, 9))
        blocks = [submission.bounds(n=n, rank=r, size=size) for r in range(size)]
        assert all(len(b) == 2 and all(type(v) is int for v in b) for b in blocks), \
            "bounds must return two ints"
        assert blocks[0][0] == 0 and blocks[-1][1] == n, "the blocks do not cover [0, n)"
        assert all(blocks[r][1] == blocks[r + 1][0] for r in range(size - 1)), \
            "the blocks are not contiguous"
        sizes = [stop - start for start, stop in blocks]
        assert min(sizes) >= 0 and max(sizes) - min(sizes) <= 1, \
            f"unbalanced blocks for n = {n} on {size} ranks: sizes {sizes}"


def test_large_sum(submission, rng):
    """Half a million terms, exact to the last unit."""
    n, key = int(rng.integers(400_000, 500_000)), key_of(rng)
    assert submission.balanced_sum(n=n, key=key) == terms.expected(n, key)
