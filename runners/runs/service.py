"""Trusted I/O services: what a sandboxed program fetches lives on the trusted side.

A package's hidden `service.py` defines `LATENCY_S` and `respond(request: str) -> str`. The grader
serves it over a Unix socket that the sandbox sees at `/service/io.sock` (`PARAGRADE_SERVICE`; a
sandbox has no network). Each request waits `LATENCY_S` of real wall time before its answer, so
only overlapping requests (threads, asyncio) speed a program up, and since the data never enters
the sandbox, no program can skip the wait. The module is importable as `paragrade_service` by the
package's timing hook and hidden tests, which check answers against the same instance.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socketserver
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from runners.runs import authored

if TYPE_CHECKING:
    from runners.package import Assignment

MODULE = "paragrade_service"
INSIDE = "/service"
SOCKET = "io.sock"
MAX_REQUEST = 4096

_servers: dict[tuple[Path, Path | None], Path] = {}
_lock = threading.Lock()


def load(assignment: Assignment) -> ModuleType:
    """The package's service module, once per process, registered as `paragrade_service`."""
    spec_m = assignment.manifest.service
    assert spec_m is not None
    path = assignment.hidden_dir / spec_m.hook
    current = sys.modules.get(MODULE)
    if current is not None and getattr(current, "__file__", None) == str(path):
        return current
    module = authored.load_module(MODULE, path, assignment.root)
    if not callable(getattr(module, "respond", None)):
        raise ImportError(f"{path.name} defines no respond()")
    if not isinstance(getattr(module, "LATENCY_S", None), int | float):
        raise ImportError(f"{path.name} defines no LATENCY_S (seconds per request)")
    return module


def ensure(assignment: Assignment, scratch: Path | None = None) -> Path:
    """The folder holding the service's socket; the server starts on first use in a process.

    It is made under `scratch` (the runner's scratch dir) when given: a runner in a container
    starts its sandboxes as siblings, and only that dir has the same path on the engine's host."""
    spec_m = assignment.manifest.service
    assert spec_m is not None
    with _lock:
        key = (assignment.hidden_dir / spec_m.hook, scratch)
        if key not in _servers:
            _servers[key] = _start(load(assignment), spec_m.max_connections, scratch)
        return _servers[key]


def _start(module: ModuleType, max_connections: int, scratch: Path | None) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="paragrade-service-", dir=scratch))
    folder.chmod(0o755)  # the sandbox user must reach the socket
    slots = threading.BoundedSemaphore(max_connections)

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            if not slots.acquire(blocking=False):
                return  # too many connections at once: this one is closed unanswered
            try:
                while line := self.rfile.readline(MAX_REQUEST + 1):
                    if len(line) > MAX_REQUEST or not line.endswith(b"\n"):
                        return
                    time.sleep(float(module.LATENCY_S))
                    try:
                        answer = str(module.respond(line[:-1].decode("utf-8", "replace")))
                    except Exception as exc:  # the program's request was bad, not the grader
                        answer = f"error: {type(exc).__name__}"
                    self.wfile.write(answer.replace("\n", " ").encode() + b"\n")
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                slots.release()

    class Server(socketserver.ThreadingUnixStreamServer):
        daemon_threads = True

    server = Server(str(folder / SOCKET), Handler)
    os.chmod(folder / SOCKET, 0o777)  # connect() needs write permission on the socket file
    threading.Thread(target=server.serve_forever, name="paragrade-service", daemon=True).start()

    def stop() -> None:
        server.shutdown()
        server.server_close()
        shutil.rmtree(folder, ignore_errors=True)

    atexit.register(stop)
    return folder
