"""Kernel density of a point cloud with Numba: a parallel ufunc and a prange loop."""

import numba  # noqa: F401  (numba.set_num_threads, numba.config.NUMBA_NUM_THREADS)
import numpy as np
import numpy.typing as npt
from numba import njit, prange, vectorize  # noqa: F401  (you will need them)


# TODO (part 1): make this a NumPy ufunc that runs on all cores:
#   @vectorize(["float64(float64, float64)"], target="parallel")
# As plain Python it only works on single numbers, not on arrays.
def triweight(r2: float, h: float) -> float:
    """Triweight kernel: (1 - r2/h²)³ when r2 < h², else 0."""
    h2 = h * h
    if r2 >= h2:
        return 0.0
    t = 1.0 - r2 / h2
    return t * t * t


@njit
def density_serial(points: npt.NDArray[np.float64], h: float) -> npt.NDArray[np.float64]:
    """The serial version your `density` is timed against (kept here to compare with)."""
    n = points.shape[0]
    h2 = h * h
    out = np.zeros(n)
    for i in range(n):
        s = 0.0
        for j in range(n):
            if j != i:
                dx = points[j, 0] - points[i, 0]
                dy = points[j, 1] - points[i, 1]
                dz = points[j, 2] - points[i, 2]
                r2 = dx * dx + dy * dy + dz * dz
                if r2 < h2:
                    t = 1.0 - r2 / h2
                    s += t * t * t
        out[i] = s
    return out


def density(points: npt.NDArray[np.float64], h: float, workers: int = 2) -> npt.NDArray[np.float64]:
    """Triweight kernel density at each point from the other points, on `workers` threads."""
    # TODO (part 2): an @njit(parallel=True) function with a prange loop, called from here
    raise NotImplementedError("density is not written yet")
