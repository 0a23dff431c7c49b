"""Public tests for numba-parallel: run them with `python -m pytest -q public_tests`."""

from typing import TYPE_CHECKING

import numpy as np
import pytest

if TYPE_CHECKING:
    from runners.grading.pytest_plugin import Submission


def expected_density(points: np.ndarray, h: float) -> np.ndarray:
    """NumPy reference: the triweight weights of all other points, summed per point."""
    r2 = ((points[:, None, :] - points[None, :, :]) ** 2).sum(axis=-1)
    w = np.where(r2 < h * h, (1.0 - r2 / (h * h)) ** 3, 0.0)
    np.fill_diagonal(w, 0.0)
    return w.sum(axis=1)


def test_triweight_known_values(submission: "Submission") -> None:
    """The kernel on a few squared distances, and broadcast like any NumPy ufunc."""
    got = submission.triweight(np.array([0.0, 0.25, 1.0, 4.0]), 1.0)
    assert got.dtype == np.float64 and got.shape == (4,)
    assert got == pytest.approx([1.0, 0.421875, 0.0, 0.0], abs=1e-14)
    grid = submission.triweight(np.array([[0.0], [1.0]]), np.array([[1.0, 2.0]]))
    assert grid.shape == (2, 2)
    assert grid == pytest.approx(np.array([[1.0, 1.0], [0.0, 0.421875]]), abs=1e-14)


def test_density_small_cloud(submission: "Submission") -> None:
    """Four corners of a square, then 300 random points, with 2 threads."""
    square = np.array([[0, 0, 0], [0.5, 0, 0], [0, 0.5, 0], [0.5, 0.5, 0]], dtype=np.float64)
    got = submission.density(points=square, h=1.0, workers=2)
    assert got == pytest.approx([0.96875] * 4, rel=1e-12)
    cloud = np.random.default_rng(0).random((300, 3))
    got = submission.density(points=cloud, h=0.3, workers=2)
    assert got.shape == (300,) and got.dtype == np.float64
    np.testing.assert_allclose(got, expected_density(cloud, 0.3), rtol=1e-9, atol=1e-9)
