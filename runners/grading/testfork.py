"""The trusted test processes' fork server: one process per runner process, started with the
test environment (the runner's credentials left out), that has the test process's modules
imported once (pytest and its plugin: runners.grading.testrun names them) and forks a fresh child for
each run of a package's tests.

A test run's child is a fork of a process that never ran a test, so it starts as a new
`python -m pytest` would, less the imports (about half a second a run on these machines). The
child takes the caller's current environment, working directory and command line, runs pytest
once and exits through the interpreter's normal exit (atexit handlers included). Its
/proc/PID/environ is the server's, which never held a credential.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Request:
    """One test run, as the caller sends it (a JSON line)."""

    argv: list[str]
    """pytest's arguments."""
    cwd: str
    env: dict[str, str]
    """The whole environment of the run (the server's own is replaced)."""
    output: str
    """The file that takes the run's stdout and stderr."""


@dataclass(frozen=True)
class Ended:
    """How a test run ended."""

    exit_code: int | None
    """pytest's exit status; None where the child ended otherwise (killed, crashed)."""
    timed_out: bool = False


ERRORS = "server.err"
"""Beside the socket: the server's stderr, which says why it did not start."""


class ForkServer:
    """The caller's side: starts the server on first use (and again if it has gone), runs one
    test run at a time per call; calls from several threads run side by side."""

    START_S = 60.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir: str | None = None  # not a TemporaryDirectory: a fork's copy would remove it
        self._owner = os.getpid()

    def _forget_if_forked(self) -> None:
        # A fork of the process that started the server (Celery's pool child) starts its own.
        if self._owner != os.getpid():
            self._proc, self._dir, self._owner = None, None, os.getpid()

    def ensure(self, env: dict[str, str], preload: tuple[str, ...]) -> str:
        """The server's socket, the server started with `env` and `preload` imported if it is
        not running."""
        with self._lock:
            self._forget_if_forked()
            if self._proc is not None and self._proc.poll() is None and self._dir is not None:
                return str(Path(self._dir) / "sock")
            self._stop()
            self._dir = tempfile.mkdtemp(prefix="paragrade-testfork-")  # mode 0700
            path = str(Path(self._dir) / "sock")
            # stdin is a pipe the server watches: it ends with this process, whatever kills it.
            # Its stderr says why it failed to start (its runs write their own elsewhere).
            errors = Path(self._dir) / ERRORS
            with errors.open("wb") as err:
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "runners.grading.testfork", path, *preload],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env,
                    start_new_session=True)
            assert self._proc.stdout is not None
            ready, _, _ = select.select([self._proc.stdout], [], [], self.START_S)
            if not ready or self._proc.stdout.readline() != b"ready\n":
                said = errors.read_bytes()[-1500:].decode(errors="replace").strip()
                self._stop()
                raise OSError("the test process's fork server did not start"
                              + (f": {said}" if said else "" if ready else f" within {self.START_S:.0f} s"))
            return path

    def _stop(self) -> None:
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            self._proc.wait()
            for pipe in (self._proc.stdin, self._proc.stdout):
                if pipe is not None:
                    pipe.close()
            self._proc = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def close(self) -> None:
        with self._lock:
            self._forget_if_forked()
            self._stop()

    def run(self, request: Request, timeout: float, preload: tuple[str, ...]) -> Ended:
        """Run pytest once in a fresh child of the server; on `timeout`, its whole process
        group is killed. A server that has gone since the last run is started again, but only
        before a child took the run: a run is never made twice."""
        deadline = time.monotonic() + timeout
        for attempt in range(2):
            try:
                with self._connect(request, preload) as conn:
                    return _await(conn, deadline)
            except NotStarted:
                if attempt:
                    raise
                self.close()
        raise AssertionError("unreachable")

    def _connect(self, request: Request, preload: tuple[str, ...]) -> socket.socket:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.ensure(request.env, preload))
            conn.sendall(json.dumps(asdict(request)).encode() + b"\n")
        except (ConnectionError, FileNotFoundError) as exc:
            conn.close()
            raise NotStarted(f"the test process's fork server did not take the run: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        return conn


class NotStarted(OSError):
    """No child took the run (the server had gone): nothing of it ran."""


def _await(conn: socket.socket, deadline: float) -> Ended:
    """The child's pid, then its exit status, from `conn`. The child's process group is killed
    at `deadline`, and when the wait is interrupted (a cancelled job, Celery's time limit), as
    `subprocess.run` kills its child."""
    reader = conn.makefile("rb")
    pid: int | None = None
    try:
        while True:
            conn.settimeout(max(deadline - time.monotonic(), 0.001))
            try:
                line = reader.readline()
            except TimeoutError:
                _kill(pid if pid is not None else _late_pid(conn))
                return Ended(exit_code=None, timed_out=True)
            except ConnectionError:
                line = b""
            if not line:
                if pid is None:  # the server ended before it forked a child for the run
                    raise NotStarted("the test process's fork server ended")
                return Ended(exit_code=None)  # the child has gone without saying how
            message = json.loads(line)
            if "pid" not in message:
                return Ended(exit_code=int(message["exit"]))
            pid = int(message["pid"])
    except NotStarted:
        raise
    except BaseException:
        _kill(pid if pid is not None else _late_pid(conn))
        raise
    finally:
        reader.close()


def _late_pid(conn: socket.socket) -> int | None:
    """The pid of a run's child that has not said who it is yet (past the deadline, or the wait
    interrupted): a child says so at once after its fork. One forked after the caller has closed
    the connection dies at that write, before its run. Read from the socket itself: a file
    object that has timed out reads no more."""
    line = b""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        conn.settimeout(5)
        while not line.endswith(b"\n") and (chunk := conn.recv(256)):
            line += chunk
        return int(json.loads(line.split(b"\n")[0])["pid"])
    return None


def _kill(pid: int | None) -> None:
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


_SERVER = ForkServer()
atexit.register(_SERVER.close)


def run(request: Request, timeout: float, preload: tuple[str, ...]) -> Ended:
    """Run pytest once in a fresh child of this process's fork server (started with `preload`
    imported where it is not running)."""
    return _SERVER.run(request, timeout, preload)


def start(env: dict[str, str], preload: tuple[str, ...]) -> None:
    """Start this process's fork server now, so that its first test run does not wait for the
    imports."""
    _SERVER.ensure(env, preload)


# The server's side.


def serve(path: str, preload: list[str]) -> None:
    """Import `preload`, then fork a child per connection until stdin ends."""
    handshake = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what an import prints goes with the server's errors, not into the handshake
    for name in preload:
        importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    handshake.write("ready\n")
    handshake.close()
    while True:
        readable, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in readable:  # the caller's process has ended, maybe killed
            listener.close()
            with contextlib.suppress(OSError):
                os.unlink(path)
                os.unlink(Path(path).with_name(ERRORS))
                os.rmdir(os.path.dirname(path))
            return
        conn, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            _child(conn)  # exits
        conn.close()


def _child(conn: socket.socket) -> None:
    """One test run: pytest with the caller's command line, environment and directory."""
    os.setsid()  # the caller kills the run's whole group on timeout
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # subprocess waits for its children
    # Every child starts from the server's state: a generator the server imported would draw
    # the same "random" inputs in every grading (`random` reseeds itself at fork; numpy's
    # global generator does not).
    if (numpy_random := sys.modules.get("numpy.random")) is not None:
        numpy_random.seed()
    request = Request(**json.loads(conn.makefile("rb").readline()))
    conn.sendall(json.dumps({"pid": os.getpid()}).encode() + b"\n")

    def ended(code: int) -> None:
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps({"exit": code}).encode() + b"\n")

    os.environ.clear()
    os.environ.update(request.env)
    from runners.settings import get_settings

    get_settings.cache_clear()
    os.chdir(request.cwd)
    sys.path[0] = request.cwd  # as `python -m pytest` run there
    out = os.open(request.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # the server's stdin is the caller's pipe
    code = [1]
    # Registered first, so run last: the caller waits for the other handlers (the stage's
    # cleanup) as it would for a process's exit.
    atexit.register(lambda: ended(code[0]))
    try:
        import pytest

        code[0] = int(pytest.main(request.argv))
    finally:
        sys.exit(code[0])


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2:])
