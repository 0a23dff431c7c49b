"""Values across the sandbox's boundary: framed messages, large arrays through files, and the
strict decoding of whatever the sandbox sends back (plain data and numeric arrays only)."""

from __future__ import annotations

import base64
import json
import math
import os
import struct
from pathlib import Path
from typing import Any

from runners.harness import worker as wire
from runners.runs.failures import ResultTooLarge

MAX_REPLY = 64 * 1024 * 1024


def framed(obj: dict[str, Any]) -> bytes:
    """One length-prefixed JSON message of the harness protocol."""
    data = json.dumps(obj).encode()
    return struct.pack(">I", len(data)) + data


class ArgsFile(wire.ArrayFileWriter):
    """A call's large arguments, written here (trusted) into the sandbox's read-only inbox."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._open = False
        super().__init__(-1)

    def put(self, arr: Any) -> list[int]:
        if not self._open:  # made on the first large array only
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            os.fchmod(self.fd, 0o644)  # whatever the umask: the sandbox's user reads it
            self._open = True
        return super().put(arr)

    def __enter__(self) -> ArgsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._open:
            os.close(self.fd)


def encode(value: Any, files: wire.ArrayFileWriter | None = None) -> Any:
    """Encode a grader-side value for the wire (the harness's own format)."""
    return wire.encode(value, files=files)


class ResultReader:
    """Reads the arrays a reply references from the result file, through the grader's own
    handle: each must lie inside the file, match its dtype and shape exactly, and all of them
    together stay under `cap` bytes (so overlapping references cannot multiply a read)."""

    def __init__(self, fd: int, cap: int) -> None:
        self.fd = fd
        self.size = os.fstat(fd).st_size
        self.left = cap
        self.cap = cap

    def array(self, ref: Any, dtype: Any, shape: list[int]) -> Any:
        import numpy as np

        if not (isinstance(ref, list) and len(ref) == 2 and all(type(x) is int for x in ref)):
            raise ValueError("a malformed array reference")
        offset, nbytes = ref
        if any(d < 0 for d in shape) or nbytes != math.prod(shape) * dtype.itemsize:
            raise ValueError("an array reference whose size does not match its shape")
        if offset < 0 or offset + nbytes > self.size:
            raise ValueError("an array reference outside the result file")
        if nbytes > self.left:
            raise ResultTooLarge(self.cap)
        self.left -= nbytes
        buf = np.empty(nbytes, dtype=np.uint8)
        done = 0
        while done < nbytes:
            n = os.preadv(self.fd, [buf[done:].data], offset + done)
            if n <= 0:
                raise ValueError("the result file changed while it was read")
            done += n
        return buf.view(dtype).reshape(shape)


_ALLOWED_KINDS = set("biufc")


def decode(value: Any, results: ResultReader | None = None) -> Any:
    """Strictly decode an untrusted value from the wire: plain data and numeric arrays only."""
    if isinstance(value, list):
        return [decode(v, results) for v in value]
    if isinstance(value, dict):
        if "__ndarray__" in value or "__ndfile__" in value:
            import numpy as np

            dtype = np.dtype(str(value["dtype"]))
            if dtype.kind not in _ALLOWED_KINDS:
                raise ValueError(f"dtype {dtype} not allowed")
            shape = [int(s) for s in value["shape"]]
            if "__ndfile__" in value:
                if results is None:
                    raise ValueError("an array reference where none can be")
                return results.array(value["__ndfile__"], dtype, shape)
            raw = base64.b64decode(str(value["__ndarray__"]), validate=True)
            return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
        if "__float__" in value:
            f = float(str(value["__float__"]))
            if math.isfinite(f):
                raise ValueError("finite float sent as special")
            return f
        return {str(k): decode(v, results) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise ValueError(f"unexpected {type(value).__name__}")
