"""numba's compiled code kept across one grading's tests: run by the tests' zygote (trusted),
inside the sandbox, before it forks the first test (`worker.py --jit-cache`; never for timing).

The zygote forks each test's child before the submission is imported, so every child compiled the
submission's numba functions again (about a second a test for a prange kernel and a parallel
ufunc). numba keeps compiled code on disk only for functions decorated with `cache=True`. Where
the zygote has numba loaded, it turns caching on for the submission's own top-level functions
(in its files; not lambdas, nested functions or closures, not numba's own functions), into
NUMBA_CACHE_DIR: a folder on the sandbox's own /tmp, which lives and dies with this grading's
sandbox. The first test compiles and saves; the next ones load.

A cached function must be the one the test would have compiled, and numba's own key (the
signature, the bytecode, a closure's values) holds neither the options it was jitted with nor
the globals it reads, which numba freezes as it compiles. The key here also holds the options;
a function is cached only where every global it reads (through its jitted callees too) is a
library's (a module, class, function or numba type not from the submission), a jitted callee
counting by its whole code and options: one that reads a value, one of the submission's own
classes, functions or modules, a jitted lambda, nested function or closure, or that recurses
(numba's own cache crashes a later process on mutual recursion), compiles in every test as
before, and so does everything of a submission whose sources may extend numba (overloads,
intrinsics: what they read as numba types a call is in no key). Any trouble loading or saving
falls back to compiling. numba's inspection of loaded code (`inspect_llvm`,
`parallel_diagnostics`) and the warnings its compiler gave are not there in later tests.

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
import marshal
import os
import re
import stat
import sys
import threading
import types
import warnings
from collections.abc import Callable
from typing import Any

MAX_FILES = 512
MAX_BYTES = 64 << 20
FOLDER = re.compile(r"[\w.-]+_[0-9a-f]{40}")
EXTENDING = re.compile(rb"extending|overload|intrinsic|lower_|typeof_impl|register_model|"
                       rb"type_callable|infer_global|templates")
FILE = re.compile(r"[\w.<>-]+-\d+\.py\d+(\.\d+\.nbc|\.nbi)")


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

    def mine(path: str | None) -> bool:
        return bool(path) and os.path.realpath(str(path)).startswith(root)

    def ours(func: Any) -> bool:
        return (inspect.isfunction(func) and func.__closure__ is None
                and "<" not in func.__qualname__  # lambdas, nested functions
                and mine(func.__code__.co_filename))

    def code_of(func: Any) -> str:
        """The function's code whole (numba's key has its bytecode only, not its constants)."""
        return hashlib.sha256(marshal.dumps(func.__code__) + repr(func.__defaults__).encode()
                              ).hexdigest()

    def library(v: Any, chain: list[int]) -> Any:
        """What a global the function reads is, where nothing of the submission can change
        it; anything else (a value, which numba would freeze; one of the submission's modules,
        classes or plain functions; a jitted lambda, nested function or closure; a recursive
        cycle, which numba's own cache crashes on) is _Unkeyable."""
        py_func = getattr(v, "py_func", None)
        if inspect.isfunction(py_func):  # a jitted function: its code and globals are compiled in
            if py_func.__closure__ is not None or "<" in py_func.__qualname__:
                raise _Unkeyable("a jitted closure, lambda or nested function")
            if id(py_func) in chain:
                raise _Unkeyable("recursion")
            return ("jit", py_func.__module__, py_func.__qualname__, code_of(py_func),
                    repr(getattr(v, "targetoptions", None)), globals_of(py_func, chain))
        if isinstance(v, types.ModuleType):
            if not getattr(v, "__file__", None) or mine(v.__file__):
                raise _Unkeyable(v.__name__)
            return ("module", v.__name__)
        if isinstance(v, (type, types.FunctionType, types.BuiltinFunctionType, np.ufunc,
                          numba.core.types.Type)):
            module = sys.modules.get(getattr(v, "__module__", None) or "")
            if module is None or mine(getattr(module, "__file__", None)):
                raise _Unkeyable(repr(v))
            return ("named", module.__name__, getattr(v, "__qualname__", repr(v)))
        raise _Unkeyable(type(v).__name__)

    def globals_of(func: Any, chain: list[int]) -> list[tuple[str, Any]]:
        chain = [*chain, id(func)]
        names: set[str] = set()
        codes = [func.__code__]
        while codes:
            code = codes.pop()
            names.update(code.co_names)
            codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
        g = func.__globals__
        return [(name, library(g[name], chain)) for name in sorted(names) if name in g]

    def extends_numba() -> bool:
        """Whether a loaded module of the submission may extend numba (overload, intrinsic …):
        what those read at typing time is in no key. Read from the sources, so a false alarm
        only costs a compile."""
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None)
            if not mine(path):
                continue
            try:
                st = os.stat(str(path))
                stamp = (str(path), st.st_mtime_ns, st.st_size)
                if stamp not in read:  # each source read once, not at every compile and load
                    with open(str(path), "rb") as fh:
                        read[stamp] = bool(EXTENDING.search(fh.read(1 << 20)))
            except OSError:
                return True
            if read[stamp]:
                return True
        return False

    read: dict[tuple[str, int, int], bool] = {}

    deciding = threading.local()  # the options of the function `_jit` decorates, for its key

    class Keyed(caching.FunctionCache):  # type: ignore[misc]
        """numba's cache, keyed also by the options a function of the submission is compiled
        with and by what it reads (only library globals: see `library`); any trouble is a miss."""

        def __init__(self, py_func: Any) -> None:
            super().__init__(py_func)
            self._options = getattr(deciding, "options", "")

        def _index_key(self, sig: Any, codegen: Any) -> Any:
            key = super()._index_key(sig, codegen)
            if not ours(self._py_func):
                return key
            if extends_numba():
                raise _Unkeyable("the submission extends numba")
            reads = repr(globals_of(self._py_func, []))
            whole = f"{self._options}\0{code_of(self._py_func)}\0{reads}"
            return (*key, hashlib.sha256(whole.encode()).hexdigest())

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
        # numba's key has no options: njit(f) and njit(parallel=True)(f) would share one code
        options = repr((target, sorted(targetoptions.items()), sorted(dict(locals).items()),
                        sorted(kwargs.items())))

        def decorate(func: Any) -> Any:
            if not cacheable(func):
                return plain(func)
            deciding.options = options
            try:
                return cached(func)
            finally:
                deciding.options = ""
        return decorate

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
