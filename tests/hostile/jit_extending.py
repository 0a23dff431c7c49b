"""A numba submission that extends numba: what its extensions read as they type is in no key
(runners/harness/jitcache.py), so nothing of it is cached."""
import numba
import numpy as np
from numba.core import types
from numba.extending import overload_method

SCALE = 2.0


@overload_method(types.Array, "scaled")
def _scaled(a):
    factor = SCALE  # read as numba types the call

    def impl(a):
        return a * factor
    return impl


@numba.njit
def use(a):
    return a.scaled().sum()


def run(scale):
    global SCALE
    SCALE = scale
    return float(use(np.ones(3)))


def listing():
    import os
    return sorted(f for _, _, files in os.walk(os.environ["NUMBA_CACHE_DIR"]) for f in files)
