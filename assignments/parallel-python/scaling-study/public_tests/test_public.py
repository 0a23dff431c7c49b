"""Public tests for the scaling study: `python -m pytest -q public_tests` runs them as one rank, `paragrade test` on MPI ranks."""

MASK = (1 << 64) - 1


def term(i: int, key: int) -> int:
    z = i ^ key
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return (z ^ (z >> 31)) >> 40


def test_small_sum(submission):
    """Ten terms with key 12345, shared between the ranks."""
    assert submission.balanced_sum(n=10, key=12345) == sum(term(i, 12345) for i in range(10))


def test_uneven_split(submission):
    """A number of terms that does not divide evenly between the ranks."""
    n = 101 * submission.workers + 1
    assert submission.balanced_sum(n=n, key=7) == sum(term(i, 7) for i in range(n))


def test_bounds_of_ten_on_four_ranks(submission):
    """bounds(10, r, 4): blocks of 3, 3, 2, 2."""
    assert [tuple(submission.bounds(n=10, rank=r, size=4)) for r in range(4)] == \
        [(0, 3), (3, 6), (6, 8), (8, 10)]
