"""The trusted side of a zygote: one sandbox for all of a grading's tests, a fresh child forked
per test (the inside is runners/harness/zygote.py)."""

from __future__ import annotations

import ast
import contextlib
import os
import socket
import threading
from pathlib import Path
from typing import Any

from runners.harness import worker as wire
from runners.runs.codec import framed
from runners.runs.failures import SubmissionFailure, failure_from_exit
from runners.runs.runconfig import RunConfig, with_wall
from runners.runs.session import Session
from runners.sandbox import ExitInfo
from runners.sandbox.base import OutputCollector

# Libraries a zygote never imports before forking: they start MPI, a GPU context or servers.
NOT_PRELOADED = ("mpi4py", "cupy", "torch", "ray", "numba.cuda", "tensorflow", "jax")


def preload_modules(files: dict[str, bytes]) -> list[str]:
    """The modules trusted code (a package's reference) imports at its top level, less its own
    modules and NOT_PRELOADED: what a zygote imports once for all of a grading's tests."""
    local = {Path(name).parts[0].removesuffix(".py") for name in files}
    names: set[str] = set()
    for name, source in files.items():
        if not name.endswith(".py"):
            continue
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            continue
        for node in tree.body:
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module)
    return sorted(n for n in names if n.split(".")[0] not in local
                  and not (n + ".").startswith(tuple(m + "." for m in NOT_PRELOADED)))


class ZygoteLost(RuntimeError):
    """The zygote could not start a test (nothing of the submission ran): use a fresh sandbox."""


class Zygote(Session):
    """One sandbox for all of a grading's tests: a trusted process in it imports the libraries
    once and forks a fresh child per test, which imports the submission (runners/harness/zygote.py
    says what is put back between tests). `session()` is the next test's Session; once the
    zygote cannot vouch for a clean sandbox it is closed and `usable` is False.

    Only for plain-Python function entries without a GPU (MPI and CUDA do not survive a fork) on
    backends with a PID namespace (`Executor.pid_namespace`): without one, the processes a test
    left could not be told from the runner's own."""

    RESET_S = 10.0

    def __init__(self, cfg: RunConfig, preload: list[str], *, jit_cache: bool = False) -> None:
        super().__init__(cfg)
        self.preload = preload
        self.jit_cache = jit_cache
        """numba's compiled code kept from one child to the next (runners/harness/jitcache.py):
        tests only, never timed calls."""
        self.usable = False
        self._tests = 0

    @staticmethod
    def suits(cfg: RunConfig) -> bool:
        return (cfg.launcher == "python" and cfg.executor.pid_namespace and not cfg.limits.gpus
                and "NUMBA_ENABLE_CUDASIM" not in cfg.extra_env)

    def _options(self) -> list[str]:
        return ["--zygote", "--preload", ",".join(self.preload)] + (
            ["--jit-cache"] if self.jit_cache else [])

    def _ready(self, ready: Any) -> None:
        self.usable = isinstance(ready, dict) and ready.get("zygote") is True

    def session(self, wall_s: float | None = None) -> ForkedSession:
        """The next test's session (`wall_s`: its own time limit, at most the sandbox's)."""
        return ForkedSession(self, wall_s)

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        """One exchange with the zygote, bounded; None (and the zygote closed) on any trouble."""
        assert self._sock is not None
        try:
            self._sock.settimeout(timeout)
            self._sock.sendall(framed(message))
            reply = wire.recv_frame(self._sock)  # the harness's own framing (trusted peer)
        except (OSError, ValueError, EOFError):
            reply = None
        if not isinstance(reply, dict):
            self.discard()
            return None
        return reply

    def fork(self, socket_inside: str, wall_s: float | None = None) -> bool:
        self._tests += 1
        self._run.proc.clock.restart(wall_s)
        reply = self.request({"op": "fork", "socket": socket_inside}, self.RESET_S)
        return reply is not None and isinstance(reply.get("pid"), int)

    def reset(self) -> int | None:
        """Put the sandbox back for the next test; the last child's exit code (None: unknown).
        A sandbox the zygote cannot vouch for is closed."""
        reply = self.request({"op": "reset"}, self.RESET_S)
        if reply is None:
            return None
        if reply.get("clean") is not True:
            self.discard()
        # The trusted side empties the result file: the next test must not read this one's.
        if self._result_fd is not None:
            os.ftruncate(self._result_fd, 0)
        status = reply.get("status")
        return os.waitstatus_to_exitcode(status) if isinstance(status, int) else None

    def discard(self) -> None:
        """Stop the sandbox for good (its ExitInfo stays in `exit_info`)."""
        self.usable = False
        if self._run.running is not None and self.exit_info is None:
            self._run.proc.kill()
        self.close()


class ForkedSession(Session):
    """A test's session in a zygote's sandbox: its own child, socket and output pipe; the
    sandbox's limits (wall clock restarted for it), files and result file shared one at a time."""

    def __init__(self, zygote: Zygote, wall_s: float | None = None) -> None:
        super().__init__(with_wall(zygote.cfg, wall_s), zygote._run)
        self._zygote = zygote
        self._result_fd = zygote._result_fd
        self._out: OutputCollector | None = None

    def start(self) -> None:
        z = self._zygote
        listener, inside = self._listen(f"test-{z._tests + 1}.sock")
        if not z.fork(inside, self.cfg.limits.wall_s):
            listener.close()
            raise ZygoteLost("the zygote did not fork")
        self._sock = self._accept(listener)
        read, write = os.pipe()
        try:
            socket.send_fds(self._sock, [b"o"], [write])
        except OSError:
            os.close(read)
            raise self._died() from None
        finally:
            os.close(write)
        self._out = OutputCollector(self.cfg.limits.output_bytes, self.kill)
        threading.Thread(target=self._out.pump, args=(os.fdopen(read, "rb"),), daemon=True).start()
        self._ready(self._recv())

    def _died(self) -> SubmissionFailure:
        z = self._zygote
        code = z.reset() if z.usable and self._run.proc.alive() else None
        z.discard()  # a test that ended badly: its sandbox serves nobody else
        self.exit_info = self._own_exit(code, z.exit_info or ExitInfo(returncode=None))
        return failure_from_exit(self.exit_info, self.cfg.limits.wall_s)

    def _own_exit(self, code: int | None, sandbox: ExitInfo) -> ExitInfo:
        """This test's end: its child's exit code and output, the sandbox's limits' flags."""
        info = ExitInfo(returncode=code if code is not None else sandbox.returncode,
                        timed_out=sandbox.timed_out, oom_killed=sandbox.oom_killed,
                        disk_exceeded=sandbox.disk_exceeded, cpu_s=sandbox.cpu_s)
        if self._out is not None:
            self._out.done.wait(2)
            info.output_exceeded = self._out.exceeded
            info.output_excerpt = self._out.excerpt()
            info.output_bytes = self._out.total
        return info

    def close(self) -> ExitInfo:
        if self.exit_info is None and self.frozen:
            self.freeze(False)
        if self._sock is not None:
            if self.exit_info is None:
                with contextlib.suppress(OSError):
                    self._sock.settimeout(1.0)
                    self._sock.sendall(framed({"op": "exit"}))
            self._sock.close()
            self._sock = None
        if self.exit_info is not None:  # it ended badly (`_died`): the sandbox is gone
            return self.exit_info
        z = self._zygote
        code = z.reset() if z.usable else None
        self.exit_info = self._own_exit(code, z.exit_info or ExitInfo(returncode=code))
        return self.exit_info



class FreshCalls:
    """A timing side's sandbox in which no state survives from one call to the next (a package's
    `[timing] fresh_calls`): each call runs in its own child of a zygote, forked and the
    submission imported before the call (untimed), and the zygote puts the sandbox back after it
    (every other process killed, whatever was written removed: runners/harness/zygote.py). A pool
    made in one call and kept in a module global, a file, a server process: none is there for the
    next call, so each call pays for what it needs. Where no zygote can serve (MPI, GPUs, a
    backend without a PID namespace, a preloaded library that starts a thread), each call gets a
    sandbox of its own. It stands where timing uses a Session: `call`, `freeze`, `pids`,
    `seconds_left`, `last_cpu_s`, `last_wait_s`; the next call's process is ready (and pinned, frozen with
    the sandbox) before the call."""

    def __init__(self, cfg: RunConfig, preload: list[str], *, exit_grace_s: float = 0.0) -> None:
        self.cfg = cfg
        self.preload = preload
        self.exit_grace_s = exit_grace_s
        self.last_cpu_s: float | None = None
        self.last_wait_s: float | None = None
        self.read_run_delay = False  # as Session's, passed on to each call's session
        self.fresh_processes = 0
        """Calls' processes started so far (forked children or sandboxes)."""
        self._zygote: Zygote | None = None
        self._own_sandboxes = not Zygote.suits(cfg)
        self._next: Session | None = None

    def __enter__(self) -> FreshCalls:
        try:
            self._prepare()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _zygote_ready(self) -> Zygote | None:
        """A usable zygote (a new sandbox where the last one was discarded); None: none serves."""
        if self._zygote is not None and self._zygote.usable:
            return self._zygote
        if self._zygote is not None:
            self._zygote.discard()
        z = self._zygote = Zygote(self.cfg, self.preload)
        try:
            z.start()
        except BaseException:
            z.discard()
            self._zygote = None
            raise
        if not z.usable:  # a preloaded library started a thread: it cannot fork
            z.discard()
            self._zygote = None
            self._own_sandboxes = True
        return self._zygote

    def _prepare(self) -> None:
        """The next call's fresh process, the submission imported in it (outside any timing)."""
        session: Session
        for _ in range(2):  # a zygote lost between calls is replaced once
            z = None if self._own_sandboxes else self._zygote_ready()
            session = z.session() if z is not None else Session(self.cfg,
                                                                exit_grace_s=self.exit_grace_s)
            session.read_run_delay = self.read_run_delay
            try:
                session.start()
            except ZygoteLost:
                continue
            except BaseException:
                session.close()
                raise
            self._next = session
            self.fresh_processes += 1
            return
        raise ZygoteLost("the zygote could not fork twice in a row")

    def call(self, function: str, *args: Any, **kwargs: Any) -> tuple[Any, float]:
        """The call in its own fresh process (as Session.call); the next one is readied after."""
        if self._next is None:
            self._prepare()
        session, self._next = self._next, None
        assert session is not None
        try:
            value, elapsed = session.call(function, *args, **kwargs)
            self.last_cpu_s, self.last_wait_s = session.last_cpu_s, session.last_wait_s
        finally:
            session.close()
        self._prepare()
        return value, elapsed

    def freeze(self, frozen: bool) -> bool:
        return self._next.freeze(frozen) if self._next is not None else True

    def pids(self) -> set[int] | None:
        return self._next.pids() if self._next is not None else set()

    @property
    def seconds_left(self) -> float:
        return self._next.seconds_left if self._next is not None else self.cfg.limits.wall_s

    def close(self) -> None:
        if self._next is not None:
            self._next.close()
            self._next = None
        if self._zygote is not None:
            self._zygote.discard()
            self._zygote = None
