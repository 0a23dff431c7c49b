"""A numba submission that looks at the compiled-code cache a zygote keeps across its tests
(runners/harness/jitcache.py): what it loaded, what is in the folder, and what it can leave there."""
import os
import threading

import numba
import numpy as np

CACHE = os.environ["NUMBA_CACHE_DIR"]
MARK = b"paragrade-was-here"


@numba.njit(parallel=True)
def total(a):
    s = 0.0
    for i in numba.prange(a.shape[0]):
        s += a[i]
    return s


@numba.vectorize(["float64(float64)"])
def double(x):
    return 2.0 * x


def run():
    """Call both; how many of their compilations were loaded from the cache."""
    assert total(np.arange(10.0)) == 45.0 and double(np.ones(2)).tolist() == [2.0, 2.0]
    return sum(total.stats.cache_hits.values()), len(total.stats.cache_misses)


SCALE = 1.0


@numba.njit
def _scaled(x):
    return SCALE * x  # numba freezes SCALE as it compiles


@numba.njit
def scaled_twice(x):
    return 2.0 * _scaled(x)


def scaled(scale, x):
    """The global set, then read by jitted code (through a jitted callee too)."""
    global SCALE
    SCALE = scale
    return scaled_twice(x)


double, triple = numba.njit(lambda x: 2 * x), numba.njit(lambda x: 3 * x)  # one line, one bytecode


def lambdas():
    return [double(10), triple(10)]


def locked():
    """A closure over an object numba's cache key cannot pickle."""
    lock = threading.Lock()

    @numba.njit
    def inner(x):
        with numba.objmode(y="int64"):
            lock.acquire()
            y = x + 1
            lock.release()
        return y
    return inner(5)


def _divide(a, b):
    return a / b


_divide_numpy, _divide_python = numba.njit(error_model="numpy")(_divide), numba.njit(_divide)


def options():
    """One function jitted with two sets of options: each keeps its own."""
    try:
        _divide_python(1.0, 0.0)
        raised = False
    except ZeroDivisionError:
        raised = True
    return [float(_divide_numpy(1.0, 0.0)), raised]


def _adder(k):
    @numba.njit
    def add(x):
        return x + k
    return add


ADD = _adder(1)


@numba.njit
def added_jit(x):
    return ADD(x)


def _make(kind):
    @numba.njit
    def op(a, b):
        return a + b if kind == "add" else a * b
    return op


OP = _make("add")


@numba.njit
def reduce(a):
    s = a[0]
    for x in a[1:]:
        s = OP(s, x)
    return s


def indirect(k, kind):
    """Globals rebound to other jitted closures before the first call."""
    global ADD, OP
    ADD, OP = _adder(k), _make(kind)
    return [added_jit(0), reduce(np.arange(1.0, 5.0))]


@numba.njit
def even(n):
    return True if n == 0 else odd(n - 1)


@numba.njit
def odd(n):
    return False if n == 0 else even(n - 1)


def recursive(n):
    """Mutual recursion (numba's own cache=True crashes a later process on it)."""
    return [even(n), odd(n)]


def from_exec():
    """A function numba cannot cache (no source file) still compiles."""
    ns: dict = {}
    exec("import numba\n@numba.njit\ndef f(x):\n    return 2 * x\n", ns)
    return ns["f"](21)


def listing():
    """Every path under the cache folder, relative to it."""
    found = []
    for top, dirs, files in os.walk(CACHE):
        found += [os.path.relpath(os.path.join(top, n), CACHE) for n in dirs + files]
    return sorted(found)


def plant():
    """Leave a canary beside numba's files, one under a numba-like name, and a link."""
    sub = next(e.path for e in os.scandir(CACHE) if e.is_dir())
    for path in (os.path.join(CACHE, "canary.txt"), os.path.join(sub, "canary.txt"),
                 os.path.join(sub, "canary.nbi"), os.path.join(sub, "solution.canary-1.py311.nbi")):
        with open(path, "wb") as fh:
            fh.write(MARK)
    os.symlink("/etc/passwd", os.path.join(sub, "solution.link-1.py311.nbi"))
    with open("/tmp/outside.txt", "wb") as fh:  # a file of this test's, outside the folder
        fh.write(MARK)
    os.link("/tmp/outside.txt", os.path.join(sub, "solution.hard-1.py311.nbi"))
    os.mkdir(os.path.join(CACHE, "stash"))
    os.chmod(sub, 0o500)


def replace():
    """Swap the cache folder for one of this test's own."""
    os.rename(CACHE, CACHE + ".old")
    os.mkdir(CACHE)
