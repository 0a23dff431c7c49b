"""Timed inputs for numba-parallel (trusted side): drawn per run, every answer spot-checked."""

from typing import Any

import numpy as np

# Rows checked per timed answer: all of them would cost NumPy seconds (n² pairs) per call.
CHECKED_ROWS = 128
# The rows to check come from the checker's own generator, so the submission cannot know them.
_pick = np.random.default_rng()


def make_input(rng: np.random.Generator, workers: int, n: int | None = None) -> dict[str, Any]:
    """About 11 000 points (~120 M pairs: a few hundred ms serially on one core)."""
    n = n or int(rng.integers(10_500, 11_500))
    side = float(rng.uniform(1.0, 3.0))
    points = rng.random((n, 3)) * side + rng.uniform(-5.0, 5.0, 3)
    return {"points": points, "h": side * float(rng.uniform(0.12, 0.16))}


def make_warmup_input(rng: np.random.Generator, workers: int) -> dict[str, Any]:
    """Each sandbox's untimed first call: the same types (numba compiles per type, not size) on
    a few hundred points, so the JIT and the thread pool start without the timed call's work."""
    return make_input(rng, workers, n=int(rng.integers(300, 600)))


def _rows_density(points: np.ndarray, h: float, rows: np.ndarray) -> np.ndarray:
    """NumPy densities of the given rows only."""
    r2 = np.zeros((len(rows), len(points)))
    for axis in range(3):  # one coordinate at a time: no (rows, n, 3) temporary
        d = points[None, :, axis] - points[rows, None, axis]
        r2 += d * d
    inside = r2 < h * h
    inside[np.arange(len(rows)), rows] = False  # a point is not its own neighbour
    t = 1.0 - r2[inside] / (h * h)
    return np.bincount(np.nonzero(inside)[0], weights=t * t * t, minlength=len(rows))


def check(inputs: dict[str, Any], result: object) -> str | None:
    """Shape and dtype in full; the values of CHECKED_ROWS random rows within 1e-9."""
    points, h = inputs["points"], inputs["h"]
    n = len(points)
    if not isinstance(result, np.ndarray) or result.dtype != np.float64 or result.shape != (n,):
        return "density must return a float64 array with one value per point"
    if not np.isfinite(result).all() or (result < -1e-9).any():
        return "densities must be finite and non-negative"
    rows = _pick.choice(n, size=min(CHECKED_ROWS, n), replace=False)
    if not np.allclose(result[rows], _rows_density(points, h, rows), rtol=1e-9, atol=1e-9):
        return "the densities are wrong"
    return None
