"""Hidden tests for treasure hunt 4: inputs drawn per grading, answers made with NumPy.

Every rank calls `gpu_mpi_sum` with the same arguments (the harness), and rank 0's answer is the
one checked. The sizes put ranges of every shape on the ranks: empty ones, one value, uneven
halves, millions of values.
"""

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("t4_timing", Path(__file__).with_name("timing.py"))
assert _spec is not None and _spec.loader is not None
_timing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_timing)
expected, draw = _timing.expected, _timing.draw


def right(got: object, args: dict) -> bool:
    return type(got) is int and got == expected(**args)


def test_random_sums(submission, rng):
    """Sums of random sizes and parameters."""
    for _ in range(3):
        args = draw(rng, int(rng.integers(100_000, 2_000_000)), m_low=2**20)
        assert right(submission.gpu_mpi_sum(**args), args)


def test_uneven_split(submission, rng):
    """n not divisible by the number of ranks, and n smaller than it (some ranks have nothing)."""
    for n in (1, submission.workers + 1, 2 * int(rng.integers(1, 50_000)) + 1):
        args = draw(rng, n, m_low=2**20)
        assert right(submission.gpu_mpi_sum(**args), args), f"wrong for n = {n}"


def test_empty_range(submission, rng):
    """n = 0 sums to zero (every rank's range is empty, and the reduction still happens)."""
    assert submission.gpu_mpi_sum(**draw(rng, 0)) == 0


def test_extreme_parameters(submission, rng):
    """m = 1, a = 0, and the largest a, c and m allowed (2³¹: a·i + c must not overflow)."""
    n = int(rng.integers(100_000, 1_000_000))
    m = 2**31
    for args in ({"n": n, "a": 0, "c": 0, "m": 1},
                 {"n": n, "a": 0, "c": int(rng.integers(0, m)), "m": m},
                 {"n": n, "a": m - 1, "c": m - 1, "m": m}):
        assert right(submission.gpu_mpi_sum(**args), args), f"wrong for {args}"


def test_result_is_an_int(submission, rng):
    """The answer is a plain int (exact, not a float)."""
    assert type(submission.gpu_mpi_sum(**draw(rng, 1000))) is int


@pytest.mark.weight(2)
def test_large_sum(submission, rng):
    """Tens of millions of large values, exact to the last unit."""
    # m of 2³⁰ or more: the total passes 2⁵³, so a float64 (or int32) sum goes wrong here.
    args = draw(rng, int(rng.integers(20_000_000, 30_000_000)), m_low=2**30)
    assert right(submission.gpu_mpi_sum(**args), args)
