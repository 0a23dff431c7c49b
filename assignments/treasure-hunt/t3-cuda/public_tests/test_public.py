"""Public tests for treasure hunt 3: run them with `paragrade test` (small on the simulator)."""

import math

import numpy as np
import pytest


def test_small_sum(submission):
    """0 + 1 + … + 99 in blocks of 32 threads."""
    assert submission.gpu_sum(np.arange(100, dtype=np.float64), threads_per_block=32) == 4950.0


def test_result_is_a_float(submission):
    """The result is a plain float."""
    assert isinstance(submission.gpu_sum(np.ones(40), threads_per_block=32), float)


def test_partial_last_block(submission):
    """300 random numbers in blocks of 64: the last block is only partly full."""
    values = np.random.default_rng(3).random(300)
    got = submission.gpu_sum(values, threads_per_block=64)
    assert got == pytest.approx(math.fsum(values.tolist()), rel=1e-9)
