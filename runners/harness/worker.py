"""Runs inside the sandbox: imports a submission and serves the grader's calls over a socket.

Nothing here is trusted. The grader stages each call's arguments (untimed), then times the call
from outside the sandbox and checks every value it receives, so whatever the submission does to
this module only hurts itself. The module
uses the standard library (and numpy when the submission's values need it); it is started as
`python -I -B worker.py --socket PATH --module FILE [--mpi]`.
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import json
import math
import socket
import struct
import sys
import traceback
from typing import Any

MAX_FRAME = 256 * 1024 * 1024
_LEN = struct.Struct(">I")


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


def encode(value: Any, depth: int = 0) -> Any:
    """Plain data only; exact types, so no subclass or lazy object reaches the wire."""
    if depth > 64:
        raise TypeError("value nested too deeply")
    t = type(value)
    if value is None or t is bool or t is int or t is str:
        return value
    if t is float:
        return value if math.isfinite(value) else {"__float__": repr(value)}
    if t is list or t is tuple:
        return [encode(v, depth + 1) for v in value]
    if t is dict:
        if not all(type(k) is str for k in value):
            raise TypeError("dict keys must be str")
        return {k: encode(v, depth + 1) for k, v in value.items()}
    np = sys.modules.get("numpy")
    if np is not None:
        if t is np.ndarray:
            if value.dtype.kind not in "biufc":
                raise TypeError(f"numpy arrays of dtype {value.dtype} cannot be returned")
            arr = np.ascontiguousarray(value)
            return {"__ndarray__": base64.b64encode(arr.tobytes()).decode(),
                    "dtype": arr.dtype.str, "shape": list(arr.shape)}
        if isinstance(value, np.generic) and t.__module__ == "numpy":
            return encode(value.item(), depth + 1)
    raise TypeError(
        f"cannot return a {t.__module__}.{t.__qualname__}: "
        "return numbers, strings, lists, dicts or numpy arrays"
    )


def decode(value: Any) -> Any:
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if "__ndarray__" in value:
            import numpy as np

            raw = base64.b64decode(value["__ndarray__"])
            return np.frombuffer(raw, dtype=np.dtype(value["dtype"])).reshape(value["shape"]).copy()
        if "__float__" in value:
            return float(value["__float__"])
        return {k: decode(v) for k, v in value.items()}
    return value


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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--socket", required=True)
    parser.add_argument("--module", required=True)
    parser.add_argument("--mpi", action="store_true")
    opts = parser.parse_args()

    comm = None
    rank = 0
    if opts.mpi:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        rank = comm.Get_rank()

    sock = None
    if rank == 0:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(opts.socket)
    try:
        module = _import_submission(opts.module)
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
            # Arguments arrive (and are decoded on every rank) before the timed call.
            staged = (decode(request["args"]), decode(request["kwargs"]))
            reply["ok"] = True
            if sock is not None:
                send_frame(sock, reply)
            continue
        try:
            fn = getattr(module, request["function"])
            args, kwargs = staged
            staged = ([], {})
            value = fn(*args, **kwargs)
            reply.update(ok=True, value=encode(value) if rank == 0 else None)
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


if __name__ == "__main__":
    sys.exit(main())
