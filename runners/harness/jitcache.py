"""numba's compiled code kept across one grading's tests: run by the tests' zygote (trusted),
inside the sandbox, before it forks the first test (`worker.py --jit-cache`; never for timing).

The zygote forks each test's child before the submission is imported, so every child compiled the
submission's numba functions again (about a second a test for a prange kernel and a parallel
ufunc). numba keeps compiled code on disk only for functions decorated with `cache=True`. Where
the zygote has numba loaded, it turns caching on for the submission's own top-level functions
(in its files; not lambdas, nested functions or closures, not numba's own functions), into
NUMBA_CACHE_DIR: a folder on the sandbox's own /tmp, which lives and dies with this grading's
sandbox. The first test compiles and saves; the next ones load.

numba's own key (the signature, the bytecode, a closure's values) would let a later test load
code compiled with an earlier test's values of the globals the function reads (numba freezes
globals as it compiles). The key here also holds those values, the globals of the jitted
functions it calls too; a function that reads a global this cannot fingerprint (an object, one
of the submission's modules) is not cached. Any trouble loading or saving falls back to compiling.

What the folder carries from one test to the next was written by the submission's own children
and is read only by them: nothing trusted reads it, and no other grading can. Between tests the
zygote keeps of it only files named as numba names them (a folder per source folder holding
`.nbi` indexes and `.nbc` code, each with one link, within MAX_FILES and MAX_BYTES), modes put
back; a folder a test replaced loses the sandbox.

The zygote also compiles one serial function of its own, so each child finds numba's compiler
set up.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import os
import re
import stat
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any

MAX_FILES = 512
MAX_BYTES = 64 << 20
FOLDER = re.compile(r"[\w.-]+_[0-9a-f]{40}")
FILE = re.compile(r"[\w.<>-]+-\d+\.py\d+(\.\d+\.nbc|\.nbi)")
SIMPLE = (int, float, complex, bool, str, bytes, type(None))


class _Unkeyable(Exception):
    """A global whose value the key cannot hold: the function is not cached."""


def install(code_root: str) -> tuple[str, int] | None:
    """Cache numba's compilations of functions in files under `code_root`, when numba is loaded;
    the cache folder (made here) and its inode, or None where nothing was installed."""
    if "numba" not in sys.modules or not os.environ.get("NUMBA_CACHE_DIR"):
        return None
    import numba
    import numpy as np
    from numba.core import caching, decorators, dispatcher
    from numba.core.errors import NumbaWarning
    from numba.np.ufunc import ufuncbuilder

    if numba.config.DISABLE_JIT:
        return None
    folder = os.environ["NUMBA_CACHE_DIR"]
    os.makedirs(folder, mode=0o700, exist_ok=True)
    numba.njit(lambda x: x + 1)(1)  # numba's compiler, set up once for every child
    root = os.path.realpath(code_root) + os.sep

    def ours(func: Any) -> bool:
        return (inspect.isfunction(func) and func.__closure__ is None
                and "<" not in func.__qualname__  # lambdas, nested functions
                and os.path.realpath(func.__code__.co_filename).startswith(root))

    def value(v: Any, seen: set[int]) -> Any:
        if isinstance(v, (*SIMPLE, np.generic)):
            return repr(v)
        if isinstance(v, tuple):
            return tuple(value(x, seen) for x in v)
        if isinstance(v, np.ndarray) and v.dtype != object:
            return (str(v.dtype), v.shape, hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest())
        py_func = getattr(v, "py_func", None)
        if inspect.isfunction(py_func):  # a jitted function: its own globals are frozen in too
            return ("jit", py_func.__module__, py_func.__qualname__, globals_of(py_func, seen))
        if isinstance(v, types.ModuleType):
            if os.path.realpath(getattr(v, "__file__", None) or "").startswith(root):
                raise _Unkeyable(v.__name__)  # the submission's module: its attributes may move
            return ("module", v.__name__)
        if isinstance(v, (type, types.FunctionType, types.BuiltinFunctionType, np.ufunc,
                          numba.core.types.Type)):
            return ("named", getattr(v, "__module__", None), getattr(v, "__qualname__", repr(v)))
        raise _Unkeyable(type(v).__name__)

    def globals_of(func: Any, seen: set[int]) -> list[tuple[str, Any]]:
        if id(func) in seen:
            return []
        seen.add(id(func))
        names: set[str] = set()
        codes = [func.__code__]
        while codes:
            code = codes.pop()
            names.update(code.co_names)
            codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
        g = func.__globals__
        return [(name, value(g[name], seen)) for name in sorted(names) if name in g]

    class Keyed(caching.FunctionCache):  # type: ignore[misc]
        """numba's cache, keyed also by the globals a function of the submission reads; any
        trouble is a miss."""

        def _index_key(self, sig: Any, codegen: Any) -> Any:
            key = super()._index_key(sig, codegen)
            if not ours(self._py_func):
                return key
            return (*key, hashlib.sha256(repr(globals_of(self._py_func, set())).encode()).hexdigest())

        def load_overload(self, sig: Any, target_context: Any) -> Any:
            try:
                return super().load_overload(sig, target_context)
            except Exception:
                return None

        def save_overload(self, sig: Any, data: Any) -> None:
            with contextlib.suppress(Exception):
                super().save_overload(sig, data)

    def cacheable(func: Any) -> bool:
        if not ours(func):
            return False
        try:
            Keyed(func)  # where it cannot be (no source file, no writable folder): not
        except Exception:
            return False
        return True

    dispatcher.FunctionCache = Keyed  # what enable_caching makes, for jit and vectorize alike
    ufuncbuilder.FunctionCache = Keyed
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
    files, size = 0, 0
    for entry in os.scandir(folder):
        if not entry.is_dir(follow_symlinks=False) or not FOLDER.fullmatch(entry.name):
            remove(entry.path)
            continue
        os.chmod(entry.path, 0o700)
        for item in os.scandir(entry.path):
            est = item.stat(follow_symlinks=False)
            keep = (stat.S_ISREG(est.st_mode) and est.st_nlink == 1 and FILE.fullmatch(item.name)
                    and files < MAX_FILES and size + est.st_size <= MAX_BYTES)
            if keep:
                files, size = files + 1, size + est.st_size
                os.chmod(item.path, 0o600)
            else:
                remove(item.path)
    return None
