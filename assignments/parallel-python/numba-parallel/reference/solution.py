"""Reference solution: a parallel triweight ufunc and a prange kernel density."""

import numba
import numpy as np
import numpy.typing as npt
from numba import njit, prange, vectorize


@njit(inline="always")
def _weight(r2: float, h2: float) -> float:
    """Triweight weight (1 - r2/h2)^3 inside the support, 0 outside."""
    if r2 >= h2:
        return 0.0
    t = 1.0 - r2 / h2
    return t * t * t


@vectorize(["float64(float64, float64)"], target="parallel")
def triweight(r2: float, h: float) -> float:
    """Element-wise triweight kernel of squared distances r2 with bandwidth h."""
    return _weight(r2, h * h)


@njit(parallel=True)
def _density(points: npt.NDArray[np.float64], h: float) -> npt.NDArray[np.float64]:
    """Kernel density of every point from all the others, one prange iteration per point."""
    n = points.shape[0]
    h2 = h * h
    out = np.empty(n)
    # Each iteration writes only its own out[i] and sums into a scalar local: no race, and no
    # reduction across threads.
    for i in prange(n):
        x, y, z = points[i, 0], points[i, 1], points[i, 2]
        s = 0.0
        for j in range(n):
            dx = points[j, 0] - x
            dy = points[j, 1] - y
            dz = points[j, 2] - z
            s += _weight(dx * dx + dy * dy + dz * dz, h2)
        # The point itself was counted with weight exactly 1; removing it after the loop keeps a
        # `j != i` branch out of the inner loop.
        out[i] = s - 1.0
    return out


def density(points: npt.NDArray[np.float64], h: float, workers: int = 2) -> npt.NDArray[np.float64]:
    """Triweight kernel density at each point from the other points, on `workers` threads."""
    # set_num_threads refuses more than NUMBA_NUM_THREADS (the sandbox sets it to the allotment).
    numba.set_num_threads(max(1, min(int(workers), numba.config.NUMBA_NUM_THREADS)))
    pts = np.ascontiguousarray(points, dtype=np.float64)
    # Hand out rows in small chunks instead of one static half per thread: if another process
    # slows one core down, the thread on the other core takes over more rows.
    with numba.parallel_chunksize(64):
        return _density(pts, float(h))
