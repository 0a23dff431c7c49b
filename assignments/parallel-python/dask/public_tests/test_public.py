"""Public tests for the dask assignment: run them with `python -m pytest -q public_tests`."""

import math

import numpy as np
import pytest


def test_summary_small(submission):
    """Three small batches, one with a NaN and an inf."""
    batches = [np.array([1.0, 2.0, np.nan]), np.array([3.0]), np.array([np.inf, 4.0, 5.0])]
    got = submission.batch_summary(batches=batches, workers=2)
    assert got["count"] == 5
    assert got["mean"] == pytest.approx(3.0, rel=1e-12)
    assert got["std"] == pytest.approx(math.sqrt(2.0), rel=1e-12)
    assert (got["min"], got["max"]) == (1.0, 5.0)


def test_constant_field(submission):
    """A constant field stays constant."""
    field = np.full((10, 6), 0.5)
    got = submission.filtered_row_means(field=field, chunk_rows=3, workers=2)
    assert isinstance(got, np.ndarray) and got.shape == (10,)
    assert np.allclose(got, 0.5, rtol=1e-12)


def test_block_boundaries(submission):
    """A ramp down the rows in blocks of 4 rows: rows next to a block boundary must see across it."""
    field = np.repeat(np.arange(12.0)[:, None], 5, axis=1)
    got = submission.filtered_row_means(field=field, chunk_rows=4, workers=2)
    # Away from the border the rows above and below pull equally, so each row keeps its value ...
    assert got[2:10] == pytest.approx(np.arange(2.0, 10.0), rel=1e-12)
    # ... and the ramp is symmetric: the top rows move up exactly as far as the bottom rows move down.
    assert got[:2] + got[:-3:-1] == pytest.approx([11.0, 11.0], rel=1e-12)
    assert got[0] > 0.0
