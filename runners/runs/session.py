"""A live sandbox around one side's code (function entries): the socket exchange with the
harness, and each call timed from outside the sandbox.

Each `Session` is one fresh sandbox (its own work dir and control socket) over a stage
(runners.runs.stage); `runners.runs.zygote` forks one per test instead where it can.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import struct
import time
from pathlib import Path
from typing import Any

from runners.protocol import Verdict
from runners.runs.codec import MAX_REPLY, ArgsFile, ResultReader, decode, encode, framed
from runners.runs.failures import (
    ProtocolViolation,
    SubmissionFailure,
    SubmissionRaised,
    failure_from_exit,
)
from runners.runs.launch import INSIDE_CTL, INSIDE_RESULT, Run
from runners.runs.runconfig import RunConfig
from runners.sandbox import ExitInfo, Mount
from runners.sandbox.schedstat import run_delays, waited_between


class Session:
    """A live sandbox running the harness around one side's code (function entries)."""

    def __init__(self, cfg: RunConfig, run: Run | None = None, *, exit_grace_s: float = 2.0
                 ) -> None:
        self.cfg = cfg
        self._run = run or Run(cfg)
        self.exit_grace_s = exit_grace_s
        """How long close() lets the harness exit before the sandbox is killed (0: a sandbox whose
        output nobody reads any more, such as a timing block's, is killed at once)."""
        self._sock: socket.socket | None = None
        self._next_id = 0
        self.exit_info: ExitInfo | None = None
        self.last_cpu_s: float | None = None
        self.last_wait_s: float | None = None
        """Seconds the sandbox's threads (those alive before and after) waited for a CPU in the
        last call: other work on its cores, for a serial side (None: not read)."""
        self.read_run_delay = False
        """Read `last_wait_s` around each call (the timed baseline's sessions only: it reads
        every thread's schedstat, work no other call needs)."""
        """CPU seconds the whole sandbox used during the last call (None: not measurable)."""
        self._ctl = self._run.dir / "ctl"
        self._result_fd: int | None = None

    def __enter__(self) -> Session:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the sandbox and wait until the submission is imported (outside any timing)."""
        run = self._run
        self._ctl.mkdir(mode=0o755)
        # The file large results come back in: made here, read through this handle only, so
        # whatever the sandbox does to its path, nothing else is ever read as its result.
        result = run.dir / "result"
        self._result_fd = os.open(result, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        if os.getuid() == 0:
            os.fchown(self._result_fd, self.cfg.sandbox_uid, self.cfg.sandbox_uid)
        m_result = Mount(result, INSIDE_RESULT, writable=True)
        m_ctl = Mount(self._ctl, INSIDE_CTL)
        listener, inside = self._listen("grader.sock")
        ex = self.cfg.executor
        program = [run.python, "-I", "-B", f"{ex.path(run.m_harness)}/worker.py",
                   "--socket", inside, "--module", run.entry, "--inbox", ex.path(m_ctl),
                   "--result", ex.path(m_result), *self._options()]
        run.launch(program, [m_ctl, m_result], ranks_end_together=True)
        self._sock = self._accept(listener)
        self._ready(self._recv())

    def _options(self) -> list[str]:
        return ["--mpi"] if self.cfg.launcher == "mpirun" else []

    def _listen(self, name: str) -> tuple[socket.socket, str]:
        """A socket in the control folder the sandbox may connect to once; its path inside."""
        path = self._ctl / name
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        os.chmod(path, 0o666)
        listener.listen(1)
        return listener, f"{self.cfg.executor.path(Mount(self._ctl, INSIDE_CTL))}/{name}"

    def _accept(self, listener: socket.socket) -> socket.socket:
        try:
            listener.settimeout(0.1)
            while True:
                try:
                    return listener.accept()[0]
                except TimeoutError:
                    if not self._run.proc.alive():
                        raise self._died() from None
        finally:
            path = listener.getsockname()
            listener.close()
            Path(path).unlink(missing_ok=True)  # nobody else may connect

    def _ready(self, ready: Any) -> None:
        if not isinstance(ready, dict) or "ready" not in ready:
            raise ProtocolViolation("the first message was not the harness's")
        if not ready["ready"]:
            err = ready.get("error") or {}
            raise SubmissionRaised(str(err.get("type", "Error")), str(err.get("message", "")),
                                   str(err.get("traceback", "")))

    def _died(self) -> SubmissionFailure:
        self.exit_info = self._run.finish(grace=5)
        return failure_from_exit(self.exit_info, self.cfg.limits.wall_s)

    def _recv(self) -> Any:
        assert self._sock is not None
        header = self._recv_exact(4)
        (n,) = struct.unpack(">I", header)
        if n > MAX_REPLY:
            raise ProtocolViolation(f"a {n}-byte message")
        try:
            return json.loads(self._recv_exact(n))
        except ValueError as exc:
            raise ProtocolViolation("a message that is not JSON") from exc

    def _recv_exact(self, n: int) -> bytes:
        assert self._sock is not None
        buf = bytearray()
        while len(buf) < n:
            remaining = self.seconds_left
            if remaining <= 0:
                self._run.proc.info.timed_out = True
                self._run.proc.kill()
                raise self._died()
            if not self._run.proc.alive() and not self._readable():
                raise self._died()
            self._sock.settimeout(min(remaining, 0.25))
            try:
                chunk = self._sock.recv(min(n - len(buf), 1 << 20))
            except TimeoutError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                raise self._died()
            buf += chunk
        return bytes(buf)

    def _readable(self) -> bool:
        assert self._sock is not None
        r, _, _ = select.select([self._sock], [], [], 0)
        return bool(r)

    def _send(self, obj: dict[str, Any]) -> None:
        assert self._sock is not None
        # A send may take long for big arguments; it is bounded by the run's deadline only.
        self._sock.settimeout(max(0.5, self.seconds_left))
        try:
            self._sock.sendall(framed(obj))
        except TimeoutError:
            self._run.proc.info.timed_out = True
            self._run.proc.kill()
            raise self._died() from None
        except OSError:
            raise self._died() from None

    def _reply(self, expected_id: int) -> dict[str, Any]:
        reply = self._recv()
        if not isinstance(reply, dict) or reply.get("id") != expected_id:
            raise ProtocolViolation("a reply to a request that was not made")
        return reply

    def call(self, function: str, *args: Any, **kwargs: Any) -> tuple[Any, float]:
        """Call the submission's function in the sandbox; return (value, seconds it took).

        The arguments are staged first (untimed); the seconds cover the call and the encoding of
        its result inside the sandbox, measured here, outside it; `last_cpu_s` the CPU time the
        sandbox used meanwhile.
        """
        assert self._sock is not None, "session not started"
        if self._readable():
            if not self._sock.recv(1, socket.MSG_PEEK):  # no message: the sandbox has ended
                raise self._died()
            raise ProtocolViolation("a message arrived before any request")
        self._next_id += 1
        name = f"args-{self._next_id}"
        try:
            with ArgsFile(self._ctl / name) as files:
                stage = {"id": self._next_id, "op": "stage", "args": encode(list(args), files),
                         "kwargs": encode(kwargs, files)}
            if files.end:
                stage["file"] = name
            self._send(stage)
            staged = self._reply(self._next_id)
        finally:
            # The sandbox keeps its mapping (a submission may hold on to its input); the name
            # goes, so the folder never holds more than the call in hand.
            (self._ctl / name).unlink(missing_ok=True)
        if staged.get("ok") is not True or self._readable():
            raise ProtocolViolation("the arguments were not acknowledged as sent")
        self._next_id += 1
        frame = framed({"id": self._next_id, "op": "call", "function": function})
        self._sock.settimeout(max(0.5, self.seconds_left))
        # The run's CPU time and its threads' run delay are read from outside (its cgroup, the
        # kernel's schedstat), around the timed window.
        pids = (self.pids() or set()) if self.read_run_delay else set()
        waited0 = run_delays(pids)
        cpu0 = self._run.proc.cpu_seconds()
        t0 = time.perf_counter_ns()
        self._sock.sendall(frame)
        reply = self._recv()
        elapsed = (time.perf_counter_ns() - t0) / 1e9
        cpu1 = self._run.proc.cpu_seconds()
        self.last_wait_s = waited_between(waited0, run_delays(pids)) if pids else None
        self.last_cpu_s = None if cpu0 is None or cpu1 is None else max(0.0, cpu1 - cpu0)
        if not isinstance(reply, dict) or reply.get("id") != self._next_id:
            raise ProtocolViolation("a reply to a request that was not made")
        if reply.get("ok") is True:
            assert self._result_fd is not None
            results = ResultReader(self._result_fd, self.cfg.limits.memory_mb << 20)
            try:
                return decode(reply.get("value"), results), elapsed
            except (ValueError, TypeError, KeyError, OSError) as exc:
                raise ProtocolViolation(f"an undecodable value ({exc})") from exc
        err = reply["error"] if isinstance(reply.get("error"), dict) else {}
        type_name = str(err.get("type", "Error"))
        if type_name == "MemoryError":
            raise SubmissionFailure(Verdict.MEMORY_EXCEEDED, "memory limit exceeded (MemoryError)")
        raise SubmissionRaised(type_name, str(err.get("message", "")),
                               str(err.get("traceback", "")))

    def freeze(self, frozen: bool) -> bool:
        """Stop (or restart) the whole sandbox between calls; False where the backend cannot.
        The wall limit does not run while frozen."""
        return self._run.proc.freeze(frozen)

    def pids(self) -> set[int] | None:
        """The sandbox's processes as the host numbers them (None: this backend cannot tell)."""
        return self._run.proc.pids() if self._run.running is not None else set()

    def roots(self) -> list[tuple[str | None, int | None]]:
        """Each node's sandbox as its first process (runners/sandbox/base.py `Running.roots`)."""
        return self._run.proc.roots() if self._run.running is not None else []

    @property
    def frozen(self) -> bool:
        return self._run.running is not None and self._run.running.clock.paused

    @property
    def seconds_left(self) -> float:
        """Wall time left before the run's limit ends it (time spent frozen excluded)."""
        return self._run.proc.clock.left()

    def kill(self) -> None:
        """Stop the sandbox now (from any thread); a call waiting on it ends as a failure."""
        if self._run.running is not None:
            self._run.running.kill()

    def close(self) -> ExitInfo:
        """Ask the harness to exit, then make sure nothing of the run is left."""
        if self.frozen:
            self.freeze(False)
        if self._sock is not None:
            self._run.ranks_end_apart()
            with contextlib.suppress(OSError):
                self._sock.settimeout(1.0)
                self._sock.sendall(framed({"op": "exit"}))
            self._sock.close()
            self._sock = None
        if self._result_fd is not None:
            os.close(self._result_fd)
            self._result_fd = None
        if self.exit_info is None and self._run.running is not None:
            self.exit_info = self._run.finish(grace=self.exit_grace_s)
        self._run.remove()
        return self.exit_info or ExitInfo(returncode=None)

    @property
    def output(self) -> str:
        return self.exit_info.output_excerpt if self.exit_info else ""
