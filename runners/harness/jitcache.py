"""numba's compiled code kept across one grading's tests: run by the zygote (trusted), inside the
sandbox, before it forks the first test.

The zygote forks each test's child before the submission is imported, so every child compiled the
submission's numba functions again (about a second a test for a prange kernel and a parallel
ufunc). numba keeps compiled code on disk only for functions decorated with `cache=True`. Where
the zygote has numba loaded, it turns caching on for every function numba compiles from the
submission's own files (not numba's own, not code made with `exec`), into NUMBA_CACHE_DIR: a
folder on the sandbox's own /tmp, which lives and dies with this grading's sandbox. The first test
compiles and saves; the next ones load.

What the folder carries from one test to the next was written by the submission's own children
and is read only by them: nothing trusted reads it, and no other grading can. Between tests the
zygote keeps of it only what numba writes there (a folder per source folder holding `.nbi`
indexes and `.nbc` code, modes put back), and a folder replaced by a test loses the sandbox.

The zygote also compiles one function of its own, so each child finds numba's compiler set up.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import stat
import sys
import warnings
from collections.abc import Callable
from typing import Any

KEPT = (".nbi", ".nbc")


def install(code_root: str) -> tuple[str, int] | None:
    """Cache numba's compilations of functions in files under `code_root`, when numba is loaded;
    the cache folder (made here) and its inode, or None where nothing was installed."""
    if "numba" not in sys.modules or not os.environ.get("NUMBA_CACHE_DIR"):
        return None
    import numba
    from numba.core import decorators
    from numba.core.caching import FunctionCache
    from numba.core.errors import NumbaWarning
    from numba.np.ufunc import decorators as ufuncs

    if numba.config.DISABLE_JIT:
        return None
    folder = os.environ["NUMBA_CACHE_DIR"]
    os.makedirs(folder, mode=0o700, exist_ok=True)
    numba.njit(lambda x: x + 1)(1)  # numba's compiler, set up once for every child

    root = os.path.realpath(code_root) + os.sep

    def cacheable(func: Any) -> bool:
        if not inspect.isfunction(func):
            return False
        if not os.path.realpath(func.__code__.co_filename).startswith(root):
            return False
        try:
            FunctionCache(func)  # where it cannot be (no source file, no writable folder): not
        except Exception:
            return False
        return True

    compile_with = decorators._jit

    def _jit(sigs: Any, locals: Any, target: str, cache: bool, targetoptions: Any,
             **kwargs: Any) -> Callable[[Any], Any]:
        plain: Callable[[Any], Any] = compile_with(sigs, locals, target, cache, targetoptions,
                                                   **kwargs)
        if cache or target not in ("cpu", "npyufunc"):
            return plain
        cached = compile_with(sigs, locals, target, True, targetoptions, **kwargs)
        return lambda func: (cached if cacheable(func) else plain)(func)

    decorators._jit = _jit
    for cls in (ufuncs.Vectorize, ufuncs.GUVectorize):
        def new(klass: type, func: Any, *args: Any, _new: Any = cls.__new__, **kws: Any) -> Any:
            if cacheable(func):
                kws["cache"] = True
            return _new(klass, func, *args, **kws)
        cls.__new__ = staticmethod(new)
    # Where numba cannot cache a function (dynamic globals), it says so; the student asked for none.
    warnings.filterwarnings("ignore", message="Cannot cache compiled function", category=NumbaWarning)
    return folder, os.lstat(folder).st_ino


def tidy(folder: str, inode: int, remove: Callable[[str], None]) -> str | None:
    """Between tests: remove from the cache folder whatever numba does not write there and put
    modes back; why the sandbox is not clean (the folder itself replaced), or None."""
    try:
        st = os.lstat(folder)
    except OSError:
        return "the compiled-code cache folder was removed"
    if not stat.S_ISDIR(st.st_mode) or st.st_ino != inode:
        return "the compiled-code cache folder was replaced"
    os.chmod(folder, 0o700)
    for entry in os.scandir(folder):
        if not entry.is_dir(follow_symlinks=False):
            remove(entry.path)
            continue
        os.chmod(entry.path, 0o700)
        for item in os.scandir(entry.path):
            if item.is_file(follow_symlinks=False) and item.name.endswith(KEPT):
                with contextlib.suppress(OSError):
                    os.chmod(item.path, 0o600)
            else:
                remove(item.path)
    return None
