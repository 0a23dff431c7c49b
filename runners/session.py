"""Trusted side of a sandboxed run: start it, call the submission, time each call from outside.

A `Stage` holds world-readable copies of what a grading's runs see (harness, submission, data);
each `Session` is one fresh sandbox (its own work dir and control socket) over a stage.
"""

from __future__ import annotations

import ast
import base64
import contextlib
import json
import math
import os
import select
import shutil
import socket
import struct
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from runners import gang
from runners.harness import worker as wire
from runners.overlay import Node
from runners.protocol import Verdict, check_relpath
from runners.sandbox import Executor, ExitInfo, Limits, Mount, Running, SandboxSpec
from runners.sandbox.base import OutputCollector

HARNESS_DIR = Path(wire.__file__).resolve().parent
MAX_REPLY = 64 * 1024 * 1024
INSIDE_SUB = "/sub"
INSIDE_WORK = "/tmp/work"
INSIDE_CTL = "/run/paragrade"
INSIDE_RESULT = "/run/paragrade-result"
INSIDE_HARNESS = "/opt/paragrade/harness"
INSIDE_DATA = "/data"


class SubmissionFailure(Exception):
    """The submission (not the grader) made a run end badly; `verdict` says how."""

    def __init__(self, verdict: Verdict, message: str, output: str = "") -> None:
        super().__init__(message)
        self.verdict = verdict
        self.message = message
        self.output = output


class SubmissionRaised(Exception):
    """The submission's function raised; the run itself is fine."""

    def __init__(self, type_name: str, message: str, tb: str) -> None:
        super().__init__(f"{type_name}: {message}")
        self.type_name = type_name
        self.message = message
        self.traceback = tb


class ResultTooLarge(SubmissionFailure):
    """The arrays a call returned add up to more than the run may hand back."""

    def __init__(self, cap: int) -> None:
        super().__init__(Verdict.OUTPUT_EXCEEDED,
                         f"the returned arrays exceed {cap >> 20} MiB (the run's memory limit)")


class ProtocolViolation(SubmissionFailure):
    """Something other than the harness wrote to the result channel."""

    def __init__(self, message: str) -> None:
        super().__init__(Verdict.FORBIDDEN, f"result channel tampered with: {message}")


class UnsafeFileName(ValueError):
    """A code file's name would be written outside its folder (or is not a plain name).

    The server checks every name at upload and import, so one reaching a runner means the
    server let it through: the worker answers a platform_error (logged, retried a bounded
    number of times, never charged to the student) rather than a verdict it cannot prove.
    """


def _chmod_tree(root: Path) -> None:
    for dirpath, _dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for f in filenames:
            os.chmod(os.path.join(dirpath, f), 0o644)


class Stage:
    """A grading's scratch area: copies of the harness, the code under test and the data."""

    def __init__(self, *, scratch: Path | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="paragrade-", dir=scratch))
        os.chmod(self.root, 0o711)  # traversable by the sandbox user, not listable
        self.harness = self.root / "harness"
        shutil.copytree(HARNESS_DIR, self.harness, ignore=shutil.ignore_patterns("__pycache__"))
        _chmod_tree(self.harness)
        self.data: Path | None = None

    def add_code(self, name: str, files: dict[str, bytes]) -> Path:
        """A folder holding one side's code (submission, baseline, reference).

        Names come from the server and are checked again here (the runner may run as root):
        UnsafeFileName, a ValueError, for any name that is not a plain relative path inside the
        folder; nothing is written then.
        """
        d = self.root / f"code-{name}"
        for rel in files:
            try:
                check_relpath(rel)
            except ValueError as exc:
                raise UnsafeFileName(f"refused to write {name} code: {exc}") from exc
        d.mkdir()
        inside = d.resolve()
        for rel, content in files.items():
            target = d / rel
            if not target.resolve().is_relative_to(inside):  # a link on the way, however made
                raise UnsafeFileName(f"refused to write {name} code: {rel!r} leaves its folder")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        _chmod_tree(d)
        return d

    def add_data(self, source: Path) -> None:
        self.data = self.root / "data"
        shutil.copytree(source, self.data)
        _chmod_tree(self.data)

    def cleanup(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass(frozen=True)
class RunConfig:
    """How to start one side's code: launcher, worker count, confinement."""

    executor: Executor
    runtime_dir: Path
    stage: Stage
    code_dir: Path
    entry_file: str
    launcher: str  # python | mpirun | torchrun
    ranks: int
    limits: Limits
    sandbox_uid: int = 65534
    extra_env: dict[str, str] = field(default_factory=dict)
    extra_mounts: tuple[Mount, ...] = ()
    entry_args: tuple[str, ...] = ()
    """Arguments the program always gets first (those of a batch script's launch line)."""
    nodes: tuple[Node, ...] = ()
    """Several: an MPI run with its ranks spread over these nodes, one sandbox each
    (runners/gang.py); none or one: one sandbox on this node."""


def _frame(obj: dict[str, Any]) -> bytes:
    """One length-prefixed JSON message of the harness protocol."""
    data = json.dumps(obj).encode()
    return struct.pack(">I", len(data)) + data


def failure_from_exit(info: ExitInfo, wall_s: float) -> SubmissionFailure:
    """Name what ended a run, from what the trusted side observed."""
    out = info.output_excerpt
    if info.node_lost:
        return SubmissionFailure(Verdict.PLATFORM_ERROR, f"node {info.node_lost} of the run was "
                                 "lost (the platform's fault: graded again, not counted)", out)
    if info.timed_out:
        return SubmissionFailure(Verdict.TIMEOUT, f"time limit exceeded ({wall_s:g} s wall)", out)
    if info.output_exceeded:
        return SubmissionFailure(Verdict.OUTPUT_EXCEEDED,
                                 f"output limit exceeded ({info.output_bytes} bytes written)", out)
    if info.disk_exceeded:
        return SubmissionFailure(Verdict.OUTPUT_EXCEEDED, "disk limit exceeded in the work dir", out)
    if info.oom_killed or "MemoryError" in out[-4000:]:
        return SubmissionFailure(Verdict.MEMORY_EXCEEDED, "memory limit exceeded", out)
    rc = info.returncode
    how = f"killed by signal {-rc}" if rc is not None and rc < 0 else f"exited with status {rc}"
    if rc in (137, -9) and info.oom_killed is False:
        how += " (killed)"
    return SubmissionFailure(Verdict.CRASHED, f"the program {how} before answering", out)


def base_env(cfg: RunConfig, workdir_inside: str) -> dict[str, str]:
    """The sandbox's whole environment: nothing inherited, so no secret can leak in."""
    n = str(len(cfg.limits.cpus))
    env = {
        "PATH": f"{cfg.runtime_dir}/bin:/usr/bin:/bin",
        "HOME": workdir_inside,
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": n,
        "OPENBLAS_NUM_THREADS": n,
        "MKL_NUM_THREADS": n,
        "NUMBA_NUM_THREADS": n,
        "NUMBA_CACHE_DIR": "/tmp/numba-cache",
        "MPLCONFIGDIR": "/tmp",
        "HYDRA_LAUNCHER": "fork",
        "UCX_LOG_LEVEL": "fatal",
        "HWLOC_HIDE_ERRORS": "2",
    }
    env.update(cfg.extra_env)
    return env


class _Run:
    """One sandbox process over a stage, with its private work dir."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.dir = cfg.stage.root / f"run-{uuid.uuid4().hex[:10]}"
        self.dir.mkdir(mode=0o711)
        self.work = self.dir / "work"
        self.work.mkdir(mode=0o700)
        if os.getuid() == 0:
            os.chown(self.work, cfg.sandbox_uid, cfg.sandbox_uid)
        ex = cfg.executor
        self.m_sub = Mount(cfg.code_dir, INSIDE_SUB)
        self.m_harness = Mount(cfg.stage.harness, INSIDE_HARNESS)
        self.m_work = Mount(self.work, INSIDE_WORK, writable=True)
        self.mounts = [self.m_sub, self.m_harness]
        if cfg.stage.data is not None:
            self.mounts.append(Mount(cfg.stage.data, INSIDE_DATA))
        self.mounts.extend(cfg.extra_mounts)
        self.python = f"{cfg.runtime_dir}/bin/python"
        self.entry = f"{ex.path(self.m_sub)}/{cfg.entry_file}"
        self.running: Running | None = None

    def launch(self, program: list[str], extra_mounts: list[Mount]) -> None:
        cfg = self.cfg
        if cfg.launcher == "mpirun":
            argv = [f"{cfg.runtime_dir}/bin/mpiexec", "-n", str(cfg.ranks), *program]
        elif cfg.launcher == "torchrun":
            argv = [f"{cfg.runtime_dir}/bin/torchrun", "--standalone",
                    f"--nproc-per-node={cfg.ranks}", *program[1:]]
        else:
            argv = program
        env = base_env(cfg, cfg.executor.path(self.m_work))
        # Processes the code starts itself (Ray's workers, a spawn pool) import it by name too.
        env["PYTHONPATH"] = cfg.executor.path(self.m_sub)
        if len(cfg.nodes) > 1 and cfg.launcher == "mpirun":
            self.running = gang.start(self, program, extra_mounts, env)
            return
        spec = SandboxSpec(argv=argv, mounts=self.mounts + extra_mounts, workdir=self.m_work,
                           env=env, limits=cfg.limits)
        self.running = cfg.executor.start(spec)

    def finish(self, grace: float = 2.0) -> ExitInfo:
        assert self.running is not None
        info = self.running.wait(grace)
        if info is None:
            self.running.kill()
            info = self.running.wait(10)
        assert info is not None
        return info

    @property
    def proc(self) -> Running:
        assert self.running is not None, "not launched"
        return self.running

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


class Session:
    """A live sandbox running the harness around one side's code (function entries)."""

    def __init__(self, cfg: RunConfig, run: _Run | None = None, *, exit_grace_s: float = 2.0
                 ) -> None:
        self.cfg = cfg
        self._run = run or _Run(cfg)
        self.exit_grace_s = exit_grace_s
        """How long close() lets the harness exit before the sandbox is killed (0: a sandbox whose
        output nobody reads any more, such as a timing block's, is killed at once)."""
        self._sock: socket.socket | None = None
        self._next_id = 0
        self.exit_info: ExitInfo | None = None
        self.last_cpu_s: float | None = None
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
        run.launch(program, [m_ctl, m_result])
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
            self._sock.sendall(_frame(obj))
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
            raise ProtocolViolation("a message arrived before any request")
        self._next_id += 1
        name = f"args-{self._next_id}"
        try:
            with _ArgsFile(self._ctl / name) as files:
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
        frame = _frame({"id": self._next_id, "op": "call", "function": function})
        self._sock.settimeout(max(0.5, self.seconds_left))
        # The run's CPU time is read from outside (its cgroup), around the timed window.
        cpu0 = self._run.proc.cpu_seconds()
        t0 = time.perf_counter_ns()
        self._sock.sendall(frame)
        reply = self._recv()
        elapsed = (time.perf_counter_ns() - t0) / 1e9
        cpu1 = self._run.proc.cpu_seconds()
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
            with contextlib.suppress(OSError):
                self._sock.settimeout(1.0)
                self._sock.sendall(_frame({"op": "exit"}))
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


def with_wall(cfg: RunConfig, wall_s: float | None) -> RunConfig:
    """`cfg` with a wall limit of at most `wall_s` (None: as it is): one test's own limit."""
    if wall_s is None or wall_s >= cfg.limits.wall_s:
        return cfg
    return replace(cfg, limits=replace(cfg.limits, wall_s=wall_s))


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

    def __init__(self, cfg: RunConfig, preload: list[str]) -> None:
        super().__init__(cfg)
        self.preload = preload
        self.usable = False
        self._tests = 0

    @staticmethod
    def suits(cfg: RunConfig) -> bool:
        return (cfg.launcher == "python" and cfg.executor.pid_namespace and not cfg.limits.gpus
                and "NUMBA_ENABLE_CUDASIM" not in cfg.extra_env)

    def _options(self) -> list[str]:
        return ["--zygote", "--preload", ",".join(self.preload)]

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
            self._sock.sendall(_frame(message))
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
                    self._sock.sendall(_frame({"op": "exit"}))
            self._sock.close()
            self._sock = None
        if self.exit_info is not None:  # it ended badly (`_died`): the sandbox is gone
            return self.exit_info
        z = self._zygote
        code = z.reset() if z.usable else None
        self.exit_info = self._own_exit(code, z.exit_info or ExitInfo(returncode=code))
        return self.exit_info


@dataclass
class ScriptResult:
    """What a script-style run left for the checker; every byte of it is untrusted."""

    returncode: int | None
    output: str
    files: dict[str, bytes]
    elapsed_s: float
    cpu_s: float | None = None  # the whole sandbox's, where the backend measures it


def run_script(cfg: RunConfig, args: list[str], *, max_file_bytes: int = 64 << 20) -> ScriptResult:
    """Run the code as a program (the launcher's way) and collect the files it wrote in out/."""
    run = _Run(cfg)
    try:
        out = run.work / "out"
        out.mkdir()
        if os.getuid() == 0:
            os.chown(out, cfg.sandbox_uid, cfg.sandbox_uid)
        t0 = time.perf_counter_ns()
        run.launch([run.python, run.entry, *cfg.entry_args, *args], [])
        info = run.finish(grace=cfg.limits.wall_s + 5)
        elapsed = (time.perf_counter_ns() - t0) / 1e9
        if info.timed_out or info.output_exceeded or info.disk_exceeded or info.oom_killed:
            raise failure_from_exit(info, cfg.limits.wall_s)
        files: dict[str, bytes] = {}
        for p in sorted(out.iterdir())[:64]:
            # Regular files only, read without following links the program may have planted.
            with contextlib.suppress(OSError):
                fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW)
                with os.fdopen(fd, "rb") as fh:
                    if os.fstat(fh.fileno()).st_size <= max_file_bytes:
                        files[p.name] = fh.read(max_file_bytes)
        return ScriptResult(info.returncode, info.output_excerpt, files, elapsed, info.cpu_s)
    finally:
        run.remove()


class _ArgsFile(wire.ArrayFileWriter):
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

    def __enter__(self) -> _ArgsFile:
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
