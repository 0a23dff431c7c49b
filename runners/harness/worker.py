"""Runs inside the sandbox: imports a submission and serves the grader's calls over a socket.

Nothing here is trusted. The grader stages each call's arguments (untimed), then times the call
from outside the sandbox and checks every value it receives, so whatever the submission does to
this module only hurts itself. The module
uses the standard library (and numpy when the submission's values need it); it is started as
`python -I -B worker.py --socket PATH --module FILE [--inbox DIR] [--result FILE] [--mpi]`.

Arrays of `FILE_MIN` bytes or more do not cross the socket: the grader writes a call's large
arguments into one file in the read-only INBOX, which every rank maps copy-on-write (the
submission may write into its arrays; the file stays as the grader wrote it), and the harness
writes large results into RESULT, a file the grader made and reads back through its own handle.
The frames then carry only `{"__ndfile__": [offset, nbytes], "dtype", "shape"}`.
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import json
import math
import mmap
import os
import signal
import socket
import struct
import sys
import traceback
from typing import Any

MAX_FRAME = 256 * 1024 * 1024
FILE_MIN = 1 << 20
"""Arrays this large (bytes) travel as files, not as base64 in a frame."""
FILE_ALIGN = 64
MADV_POPULATE_READ = 22  # Linux >= 5.14; the mmap module of Python 3.11 does not name it
_LEN = struct.Struct(">I")


class ArrayFileWriter:
    """Appends arrays to an open file at aligned offsets; `put` returns their [offset, nbytes]."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.end = 0

    def reset(self) -> None:
        os.ftruncate(self.fd, 0)
        self.end = 0

    def put(self, arr: Any) -> list[int]:
        np = sys.modules["numpy"]
        raw = memoryview(arr.reshape(-1).view(np.uint8))
        offset = -(-self.end // FILE_ALIGN) * FILE_ALIGN
        done = 0
        while done < len(raw):
            done += os.pwrite(self.fd, raw[done:], offset + done)
        self.end = offset + len(raw)
        return [offset, len(raw)]


def map_array_file(path: str) -> mmap.mmap:
    """A file of arrays, mapped copy-on-write and its pages read in now (before any timing)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        mapped = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE,
                           prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    try:
        mapped.madvise(MADV_POPULATE_READ)
    except (OSError, ValueError):  # older kernel: touch one byte per page
        for i in range(0, size, mmap.PAGESIZE):
            mapped[i]
    return mapped


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError("grader closed the channel")
        buf += chunk
    return bytes(buf)


def recv_frame(sock: socket.socket) -> Any:
    (n,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
    if n > MAX_FRAME:
        raise ValueError("frame too large")
    return json.loads(_recv_exact(sock, n))


def send_frame(sock: socket.socket, obj: Any) -> None:
    data = json.dumps(obj, allow_nan=True).encode()
    sock.sendall(_LEN.pack(len(data)) + data)


def encode(value: Any, depth: int = 0, files: ArrayFileWriter | None = None) -> Any:
    """Plain data only; exact types, so no subclass or lazy object reaches the wire. With
    `files`, arrays of FILE_MIN bytes or more are written there and referenced."""
    if depth > 64:
        raise TypeError("value nested too deeply")
    t = type(value)
    if value is None or t is bool or t is int or t is str:
        return value
    if t is float:
        return value if math.isfinite(value) else {"__float__": repr(value)}
    if t is list or t is tuple:
        return [encode(v, depth + 1, files) for v in value]
    if t is dict:
        if not all(type(k) is str for k in value):
            raise TypeError("dict keys must be str")
        return {k: encode(v, depth + 1, files) for k, v in value.items()}
    np = sys.modules.get("numpy")
    if np is not None:
        if t is np.ndarray:
            if value.dtype.kind not in "biufc":
                raise TypeError(f"numpy arrays of dtype {value.dtype} cannot be returned")
            arr = np.ascontiguousarray(value)
            if files is not None and arr.nbytes >= FILE_MIN:
                return {"__ndfile__": files.put(arr), "dtype": arr.dtype.str,
                        "shape": list(arr.shape)}
            return {"__ndarray__": base64.b64encode(arr.tobytes()).decode(),
                    "dtype": arr.dtype.str, "shape": list(arr.shape)}
        if isinstance(value, np.generic) and t.__module__ == "numpy":
            return encode(value.item(), depth + 1, files)
    raise TypeError(
        f"cannot return a {t.__module__}.{t.__qualname__}: "
        "return numbers, strings, lists, dicts or numpy arrays"
    )


def decode(value: Any, mapped: mmap.mmap | None = None) -> Any:
    if isinstance(value, list):
        return [decode(v, mapped) for v in value]
    if isinstance(value, dict):
        if "__ndarray__" in value:
            import numpy as np

            raw = base64.b64decode(value["__ndarray__"])
            return np.frombuffer(raw, dtype=np.dtype(value["dtype"])).reshape(value["shape"]).copy()
        if "__ndfile__" in value:
            import numpy as np

            offset, _nbytes = value["__ndfile__"]
            return np.ndarray(value["shape"], dtype=np.dtype(value["dtype"]), buffer=mapped,
                              offset=offset)
        if "__float__" in value:
            return float(value["__float__"])
        return {k: decode(v, mapped) for k, v in value.items()}
    return value


def encode_result(value: Any, files: ArrayFileWriter | None) -> Any:
    """The call's value for the reply; large arrays into the result file (a clear error when
    the file-size limit stops them, rather than SIGXFSZ killing the run)."""
    if files is None:
        return encode(value)
    files.reset()
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        return encode(value, files=files)
    except OSError as exc:
        raise OSError(f"the result is too large to return ({exc.strerror})") from None
    finally:
        signal.signal(signal.SIGXFSZ, previous)


def _error(exc: BaseException) -> dict[str, str]:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    # Keep the submission's own frames; ours say nothing useful to a student.
    kept = [line for line in tb if __file__ not in line]
    return {"type": type(exc).__name__, "message": str(exc)[:2000], "traceback": "".join(kept)[-6000:]}


def _import_submission(path: str) -> Any:
    directory, _, filename = path.rpartition("/")
    sys.path.insert(0, directory)
    name = filename.removesuffix(".py")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {filename}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # so that pickling its functions (multiprocessing) works
    spec.loader.exec_module(module)
    return module


def _connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    return sock


def serve(socket_path: str, module_path: str, inbox: str | None, result: str | None,
          mpi: bool, *, output_fd: bool = False) -> int:
    """Import the submission and answer the grader's calls until told to exit. `output_fd`: the
    grader first hands over the pipe this process's output goes to (a child of the zygote)."""
    comm = None
    rank = 0
    if mpi:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        rank = comm.Get_rank()

    sock = None
    results: ArrayFileWriter | None = None
    if rank == 0:
        sock = _connect(socket_path)
        if output_fd:
            _msg, fds, _flags, _addr = socket.recv_fds(sock, 1, 1)
            if len(fds) != 1:
                return 70
            for std in (1, 2):
                os.dup2(fds[0], std)
            os.close(fds[0])
        if result:  # opened before the submission is imported, kept for every call
            results = ArrayFileWriter(os.open(result, os.O_WRONLY | os.O_CLOEXEC))
    try:
        module = _import_submission(module_path)
        ready: dict[str, Any] = {"ready": True}
    except BaseException as exc:  # the submission's import failing is an answer, not our crash
        module = None
        ready = {"ready": False, "error": _error(exc)}
    if comm is not None:
        oks = comm.gather(module is not None, root=0)
        if rank == 0 and ready["ready"] and not all(oks or []):
            ready = {"ready": False, "error": {"type": "ImportError", "traceback": "",
                                               "message": "the submission failed to import on a rank"}}
    if sock is not None:
        send_frame(sock, ready)
    if module is None:
        return 1

    staged: tuple[list[Any], dict[str, Any]] = ([], {})
    while True:
        request = recv_frame(sock) if sock is not None else None
        if comm is not None:
            request = comm.bcast(request, root=0)
        if request is None or request.get("op") == "exit":
            return 0
        reply: dict[str, Any] = {"id": request["id"]}
        if request.get("op") == "stage":
            # Arguments arrive (and are decoded, files mapped, on every rank) before the timed call.
            mapped = None
            # Ranks on other nodes than the grader's have no inbox: rank 0 sends them its copy.
            if request.get("file") and inbox and os.path.isdir(inbox):
                mapped = map_array_file(os.path.join(inbox, os.path.basename(request["file"])))
            remote = bool(request.get("file")) and comm is not None and not all(
                comm.allgather(mapped is not None))
            if not remote or rank == 0:
                staged = (decode(request["args"], mapped), decode(request["kwargs"], mapped))
            if remote:
                assert comm is not None
                staged = comm.bcast(staged if rank == 0 else None, root=0)
            if comm is not None and request.get("file"):
                comm.barrier()  # every rank has the file mapped before the grader removes its name
            reply["ok"] = True
            if sock is not None:
                send_frame(sock, reply)
            continue
        try:
            fn = getattr(module, request["function"])
            args, kwargs = staged
            staged = ([], {})
            value = fn(*args, **kwargs)
            reply.update(ok=True, value=encode_result(value, results) if rank == 0 else None)
        except BaseException as exc:
            reply.update(ok=False, error=_error(exc))
        if comm is not None:
            replies = comm.gather(reply, root=0)
            if rank == 0:
                failed = [r for r in replies or [] if not r["ok"]]
                if failed and reply["ok"]:
                    reply = failed[0]
        if sock is not None:
            send_frame(sock, reply)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    parser.add_argument("--module", required=True)
    parser.add_argument("--inbox", help="folder of the grader's argument files")
    parser.add_argument("--result", help="file for large results, made by the grader")
    parser.add_argument("--mpi", action="store_true")
    parser.add_argument("--zygote", action="store_true",
                        help="fork a fresh child per test instead of importing the submission")
    parser.add_argument("--preload", default="", help="modules the zygote imports (comma-separated)")
    parser.add_argument("--jit-cache", action="store_true",
                        help="the zygote keeps numba's compiled code across its children (tests)")
    opts = parser.parse_args()
    if opts.zygote:
        spec = importlib.util.spec_from_file_location(
            "paragrade_zygote", os.path.join(os.path.dirname(os.path.abspath(__file__)), "zygote.py"))
        assert spec is not None and spec.loader is not None
        zygote = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(zygote)
        preload = [m for m in opts.preload.split(",") if m]
        root = os.path.dirname(opts.module) if opts.jit_cache else None
        code: int = zygote.Zygote(opts.socket, opts.result, preload, send=send_frame,
                                  recv=recv_frame, code_root=root).run(
            lambda path: serve(path, opts.module, opts.inbox, opts.result, False, output_fd=True))
        return code
    return serve(opts.socket, opts.module, opts.inbox, opts.result, opts.mpi)


if __name__ == "__main__":
    sys.exit(main())
