"""Hidden tests for treasure hunt 3: inputs drawn per grading, answers computed here.

Under the CUDA simulator (`submission.simulated`) every CUDA thread is an OS thread: the arrays
stay at a few hundred elements and blocks at <= 128 threads. On a real GPU they are larger (up
to 16 MB each; the timed calls, hidden/timing.py, take 512 MiB).
"""

import math

import numpy as np
import pytest


def size(submission, rng, simulated: tuple[int, int], real: tuple[int, int]) -> int:
    lo, hi = simulated if submission.simulated else real
    return int(rng.integers(lo, hi))


def big_block(submission) -> int:
    return 128 if submission.simulated else 256


def close(got: object, values: np.ndarray, rel: float = 1e-9) -> bool:
    """A float within `rel` of the exact sum, relative to the sum of magnitudes."""
    exact = values.astype(np.float64)
    want = math.fsum(exact.tolist())
    scale = float(np.abs(exact).sum())
    return isinstance(got, float) and abs(got - want) <= rel * scale + 1e-12


def test_random_array(submission, rng):
    """Random positive float64 values, several blocks, the last one partly full."""
    values = rng.random(size(submission, rng, (700, 900), (100_000, 1_000_000)))
    assert close(submission.gpu_sum(values, threads_per_block=big_block(submission)), values)


def test_partial_last_block(submission, rng):
    """A length that is not a multiple of the block size (threads past the end must add 0)."""
    tpb = 64 if submission.simulated else 512
    blocks = size(submission, rng, (2, 5), (500, 2_000))
    values = rng.random(blocks * tpb + int(rng.integers(1, tpb)))
    assert close(submission.gpu_sum(values, threads_per_block=tpb), values)


def test_fewer_elements_than_threads(submission, rng):
    """Fewer elements than threads in one block (a single, mostly empty block)."""
    tpb = big_block(submission)
    values = rng.uniform(1.0, 10.0, int(rng.integers(2, tpb // 2)))
    assert close(submission.gpu_sum(values, threads_per_block=tpb), values)


def test_one_element(submission, rng):
    """A single element sums to itself."""
    values = rng.uniform(-100.0, 100.0, 1)
    assert submission.gpu_sum(values, threads_per_block=32) == float(values[0])


def test_empty_array(submission):
    """An empty array sums to 0.0 (no kernel can be launched with 0 blocks)."""
    assert submission.gpu_sum(np.zeros(0), threads_per_block=32) == 0.0


def test_block_sizes(submission, rng):
    """The same kind of array with several block sizes (the tree must follow blockDim.x)."""
    sizes = (32, 64, 128) if submission.simulated else (32, 128, 512, 1024)
    for tpb in sizes:
        values = rng.random(size(submission, rng, (200, 300), (50_000, 200_000)))
        got = submission.gpu_sum(values, threads_per_block=tpb)
        assert close(got, values), f"wrong with {tpb} threads per block"


def test_signed_values(submission, rng):
    """Values of both signs (normally distributed)."""
    values = rng.normal(0.0, 10.0, size(submission, rng, (400, 600), (500_000, 1_000_000)))
    assert close(submission.gpu_sum(values, threads_per_block=big_block(submission)), values)


def test_exact_integers(submission, rng):
    """Whole numbers of both signs, summed exactly (a lost or doubled element shows)."""
    n = size(submission, rng, (300, 500), (500_000, 1_000_000))
    values = rng.integers(-1_000, 1_000, n).astype(np.float64)
    got = submission.gpu_sum(values, threads_per_block=64 if submission.simulated else 256)
    assert isinstance(got, float) and got == float(values.sum()), "the sum is off"


@pytest.mark.weight(2)
def test_float32_input(submission, rng):
    """A float32 array (load it into a float64 shared array): within 1e-5 of the exact sum."""
    values = rng.random(size(submission, rng, (400, 600), (1_000_000, 2_000_000)))
    values = values.astype(np.float32)
    got = submission.gpu_sum(values, threads_per_block=64 if submission.simulated else 256)
    assert close(got, values, rel=1e-5)
