"""Hidden tests for treasure hunt 3: inputs drawn per grading, answers made with NumPy.

Under the CUDA simulator (`submission.simulated`) every CUDA thread is an OS thread: the sums
stay at a few hundred values and blocks at <= 128 threads. On a real GPU they are larger (up to
two million values; the timed calls, hidden/timing.py, take 2²⁵–2²⁶).
"""

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("t3_timing", Path(__file__).with_name("timing.py"))
assert _spec is not None and _spec.loader is not None
_timing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_timing)
expected, draw = _timing.expected, _timing.draw


def size(submission, rng, simulated: tuple[int, int], real: tuple[int, int]) -> int:
    lo, hi = simulated if submission.simulated else real
    return int(rng.integers(lo, hi))


def big_block(submission) -> int:
    return 128 if submission.simulated else 256


def right(submission, args: dict, tpb: int) -> bool:
    got = submission.gpu_sum(**args, threads_per_block=tpb)
    return type(got) is int and got == expected(**args)


def test_random_sums(submission, rng):
    """Random parameters, several blocks, the last one partly full."""
    args = draw(rng, size(submission, rng, (700, 900), (100_000, 1_000_000)))
    assert right(submission, args, big_block(submission))


def test_partial_last_block(submission, rng):
    """A count that is not a multiple of the block size (threads past the end must add 0)."""
    tpb = 64 if submission.simulated else 512
    blocks = size(submission, rng, (2, 5), (500, 2_000))
    args = draw(rng, blocks * tpb + int(rng.integers(1, tpb)))
    assert right(submission, args, tpb)


def test_fewer_values_than_threads(submission, rng):
    """Fewer values than threads in one block (a single, mostly empty block)."""
    tpb = big_block(submission)
    assert right(submission, draw(rng, int(rng.integers(2, tpb // 2))), tpb)


def test_one_value(submission, rng):
    """A single value: value(0), made from c."""
    args = draw(rng, 1)
    assert submission.gpu_sum(**args, threads_per_block=32) == expected(**args)


def test_empty_range(submission, rng):
    """n = 0 sums to 0 (no kernel can be launched with 0 blocks)."""
    assert submission.gpu_sum(**draw(rng, 0), threads_per_block=32) == 0


def test_block_sizes(submission, rng):
    """Several block sizes (the tree must follow blockDim.x)."""
    sizes = (32, 64, 128) if submission.simulated else (32, 128, 512, 1024)
    for tpb in sizes:
        args = draw(rng, size(submission, rng, (200, 300), (50_000, 200_000)))
        assert right(submission, args, tpb), f"wrong with {tpb} threads per block"


def test_extreme_parameters(submission, rng):
    """m = 1, a = 0, and the largest a, c and m allowed (2³¹: a·i + c must not overflow)."""
    n = size(submission, rng, (100, 300), (100_000, 1_000_000))
    m = 2**31
    for args in ({"n": n, "a": 0, "c": 0, "m": 1},
                 {"n": n, "a": 0, "c": int(rng.integers(0, m)), "m": m},
                 {"n": n, "a": m - 1, "c": m - 1, "m": m}):
        assert right(submission, args, big_block(submission)), f"wrong for {args}"


@pytest.mark.weight(2)
def test_large_sums(submission, rng):
    """Large values (m of 2³⁰ or more): the sum exact to the last unit."""
    n = size(submission, rng, (400, 600), (1_000_000, 2_000_000))
    args = draw(rng, n, m_low=2**30)
    assert right(submission, args, 64 if submission.simulated else 256)
