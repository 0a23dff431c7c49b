"""Serial baseline (the speedup reference): one core, the same loops without prange."""

import numpy as np
import numpy.typing as npt
from numba import njit, vectorize


@njit(inline="always")
def _weight(r2: float, h2: float) -> float:
    """Triweight weight (1 - r2/h2)^3 inside the support, 0 outside."""
    if r2 >= h2:
        return 0.0
    t = 1.0 - r2 / h2
    return t * t * t


@vectorize(["float64(float64, float64)"])
def triweight(r2: float, h: float) -> float:
    """Element-wise triweight kernel (serial ufunc)."""
    return _weight(r2, h * h)


@njit
def _density(points: npt.NDArray[np.float64], h: float) -> npt.NDArray[np.float64]:
    """Kernel density of every point from all the others, serially."""
    n = points.shape[0]
    h2 = h * h
    out = np.empty(n)
    for i in range(n):
        x, y, z = points[i, 0], points[i, 1], points[i, 2]
        s = 0.0
        for j in range(n):
            dx = points[j, 0] - x
            dy = points[j, 1] - y
            dz = points[j, 2] - z
            s += _weight(dx * dx + dy * dy + dz * dz, h2)
        out[i] = s - 1.0  # the point itself contributed exactly 1
    return out


def density(points: npt.NDArray[np.float64], h: float, workers: int = 1) -> npt.NDArray[np.float64]:
    """Serial kernel density; `workers` is accepted and ignored."""
    return _density(np.ascontiguousarray(points, dtype=np.float64), float(h))
