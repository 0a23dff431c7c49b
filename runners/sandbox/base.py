"""The executor interface every sandbox backend implements, and the plumbing they share."""

from __future__ import annotations

import abc
import contextlib
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from runners.sandbox import cgroups
from runners.sandbox.schedstat import root_of

EXCERPT_BYTES = 32 * 1024


@dataclass(frozen=True)
class Mount:
    """A host path the sandboxed program sees at `inside`."""

    host: Path
    inside: str
    writable: bool = False


@dataclass(frozen=True)
class Limits:
    """What one sandboxed run may use. Never a CPU-time limit: that punishes parallel code."""

    cpus: tuple[int, ...]
    memory_mb: int = 2048
    pids: int = 512
    nofile: int = 1024
    fsize_bytes: int = 256 * 1024 * 1024
    disk_bytes: int = 256 * 1024 * 1024
    output_bytes: int = 8 * 1024 * 1024
    wall_s: float = 120.0
    gpus: int = 0


@dataclass(frozen=True)
class SandboxSpec:
    """One program to run: argv and env are in the sandbox's own terms (see Executor.path)."""

    argv: list[str]
    mounts: list[Mount]
    workdir: Mount
    env: dict[str, str]
    limits: Limits
    netns: str | None = None
    """A named network namespace to run in with its network shared: one node of a multi-node
    run on its per-run overlay (runners/nodes/overlay.py). None: no network at all."""
    hostname: str | None = None


@dataclass
class ExitInfo:
    """How a run ended, as the trusted side observed it."""

    returncode: int | None
    timed_out: bool = False
    output_exceeded: bool = False
    disk_exceeded: bool = False
    oom_killed: bool = False
    output_excerpt: str = ""
    output_bytes: int = 0
    wall_s: float = 0.0
    cpu_s: float | None = None
    """CPU time of the whole run (every process), read from outside at its end; None where the
    backend cannot tell."""
    node_lost: str | None = None
    """A multi-node run: which node's host went away under it (the platform's fault)."""
    ranks_ended_on: str | None = None
    """A multi-node run stopped because the ranks on these nodes ended first (the submission's:
    a rank that crashed or exited while the others still worked)."""


class OutputCollector:
    """Reads a stream to its end, keeping a head and tail excerpt and counting every byte."""

    def __init__(self, limit: int, on_exceeded: Callable[[], None]) -> None:
        self.limit = limit
        self.total = 0
        self.exceeded = False
        self._head = bytearray()
        self._tail = bytearray()
        self._on_exceeded = on_exceeded
        self.done = threading.Event()

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = EXCERPT_BYTES - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self._tail = (self._tail + chunk)[-EXCERPT_BYTES:]
        if self.total > self.limit and not self.exceeded:
            self.exceeded = True
            self._on_exceeded()

    def pump(self, stream: IO[bytes] | Iterable[bytes]) -> None:
        try:
            if hasattr(stream, "read1"):
                while chunk := stream.read1(65536):
                    self.feed(chunk)
            else:
                for chunk in stream:
                    self.feed(chunk)
        except (OSError, ValueError):
            pass
        finally:
            self.done.set()

    def excerpt(self) -> str:
        text = self._head.decode(errors="replace")
        if self._tail:
            skipped = self.total - len(self._head) - len(self._tail)
            if skipped > 0:
                text += f"\n[… {skipped} bytes not shown …]\n"
            text += self._tail.decode(errors="replace")
        return text


def dir_size(path: Path, cap: int) -> int:
    """Bytes under `path`, stopping early once past `cap`."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
            if total > cap:
                return total
    return total


_TICK = os.sysconf("SC_CLK_TCK")


def _proc_table() -> dict[int, tuple[int, float]]:
    """Every live process: pid -> (parent pid, CPU seconds with what it reaped of its children)."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                raw = fh.read()
            fields = raw[raw.rindex(b")") + 2:].split()  # after "pid (comm) "
            ticks = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
            stats[int(entry.name)] = (int(fields[1]), ticks / _TICK)
    return stats


def _tree(stats: dict[int, tuple[int, float]], root: int) -> list[int]:
    """`root` and every live process under it (empty when `root` is gone)."""
    if root not in stats:
        return []
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


def tree_cpu_seconds(root: int) -> float | None:
    """CPU time of a process tree (where no cgroup accounts for it): user + system time of every
    live process under `root`, with what each reaped of its children. Tick resolution; a process
    that left the tree (re-parented outside it) is not counted. None when `root` is gone."""
    stats = _proc_table()
    tree = _tree(stats, root)
    return sum(stats[pid][1] for pid in tree) if tree else None


def tree_pids(root: int) -> set[int]:
    """`root` and the live processes under it (where no cgroup lists a run's processes)."""
    return set(_tree(_proc_table(), root))


class WallClock:
    """A run's wall-clock limit, which does not run while the run is frozen."""

    def __init__(self, limit_s: float) -> None:
        self.started = time.monotonic()
        self.limit_s = limit_s
        self._deadline = self.started + limit_s
        self._paused_at: float | None = None

    def restart(self, limit_s: float | None = None) -> None:
        """The whole limit (or `limit_s`) again from now (a sandbox that serves one test after
        another, each with its own limit)."""
        self.resume()
        self._deadline = time.monotonic() + (self.limit_s if limit_s is None else limit_s)

    @property
    def paused(self) -> bool:
        return self._paused_at is not None

    def pause(self) -> None:
        if self._paused_at is None:
            self._paused_at = time.monotonic()

    def resume(self) -> None:
        if self._paused_at is not None:
            self._deadline += time.monotonic() - self._paused_at
            self._paused_at = None

    def left(self) -> float:
        """Seconds of the limit left (frozen time excluded)."""
        return self._deadline - (self._paused_at or time.monotonic())

    def expired(self) -> bool:
        return self.left() <= 0 and not self.paused


class Running(abc.ABC):
    """A started sandboxed program."""

    info: ExitInfo
    clock: WallClock

    @abc.abstractmethod
    def wait(self, timeout: float | None = None) -> ExitInfo | None:
        """Wait for the end (None if still running after `timeout`)."""

    @abc.abstractmethod
    def kill(self) -> None:
        """Stop the program and everything it started."""

    @abc.abstractmethod
    def alive(self) -> bool: ...

    def freeze(self, frozen: bool) -> bool:
        """Stop (or restart) the whole program, children and threads, without ending it; False
        where this backend cannot, and then nothing changed."""
        return False

    def cpu_seconds(self) -> float | None:
        """CPU time the whole run (every process, thread and rank) has used so far, read from
        outside it; None where this backend cannot tell."""
        return None

    def pids(self) -> set[int] | None:
        """The run's processes as this host numbers them; None where this backend cannot tell."""
        return None

    def roots(self) -> list[tuple[str | None, int | None]]:
        """Each node's sandbox as its first process (every other one under it), by the node's
        name (None on one node): what a profile samples. The process is None where this host
        cannot see it (not started yet; another host's node)."""
        pids = self.pids()
        return [(None, root_of(pids) if pids else None)]


class Executor(abc.ABC):
    """A way to run an untrusted program under limits."""

    name: str
    sandboxed: bool = True
    pid_namespace: bool = True
    """Its runs have a PID namespace of their own (a zygote may kill every other process in it)."""
    joins_netns: bool = False
    """It can run a sandbox inside a given network namespace (`SandboxSpec.netns`): one node of
    a multi-node run."""

    def path(self, mount: Mount) -> str:
        """Where the program sees a mount (namespaced backends: `inside`)."""
        return mount.inside

    @abc.abstractmethod
    def start(self, spec: SandboxSpec) -> Running:
        """Start the program; it runs until it ends, is killed, or hits a limit."""

    def isolation(self) -> list[str]:
        """The kinds of isolation this backend provides on this host."""
        return []

    def image(self) -> str | None:
        """The container image this backend runs (with its digest where known)."""
        return None

    def can_freeze(self) -> bool:
        """Whether its runs can be frozen (`Running.freeze`): here, where a cgroup freezer is."""
        return cgroups.probe()[1]

    def sweep(self) -> int:
        """Remove what runs of an earlier, killed runner left behind; how many were removed."""
        return 0

    def cpuset_enforced(self) -> bool:
        """Whether a cpuset (not only affinity) confines its runs: here, where cgroups allow."""
        return cgroups.probe()[0]


def host_prefix(limits: Limits, cg: cgroups.RunCgroup, *, drop_to_uid: int | None,
                netns: str | None = None) -> list[str]:
    """Commands that confine a host process before it execs the sandbox: network namespace,
    cgroup, rlimits, user."""
    prefix: list[str] = []
    if cg.procs_files:
        attach = " && ".join(f"echo $$ > {shlex.quote(str(p))}" for p in cg.procs_files)
        prefix += ["/bin/sh", "-c", f'{attach} && exec "$@"', "sh"]
    rl = [
        f"--nofile={limits.nofile}:{limits.nofile}",
        f"--fsize={limits.fsize_bytes}:{limits.fsize_bytes}",
        "--core=0:0",
    ]
    if drop_to_uid is not None or os.getuid() != 0:
        # RLIMIT_NPROC binds only non-root users; the pids cgroup is the real cap where it exists.
        rl.append(f"--nproc={limits.pids}:{limits.pids}")
    if cg.memory_dir is None:
        # A CUDA context reserves address space it never touches, so that an address-space cap
        # fails a GPU run's first large mapping (an H200: mmap of t3's 512 MiB input, ENOMEM).
        # Private writable mappings (RLIMIT_DATA) are what its memory really is.
        cap = "--data" if limits.gpus else "--as"
        rl.append(f"{cap}={limits.memory_mb * 1024 * 1024 * 4}")
    rl.append("--msgqueue=0:0")  # no POSIX message queue: state nobody could list or clear
    prefix += ["prlimit", *rl, "--"]
    if not any("cpuset" in e for e in cg.enforced):  # joining a cpuset cgroup sets the affinity
        prefix += ["taskset", "-c", ",".join(map(str, limits.cpus))]
    if netns is not None:
        # Entered while still root (the namespace is the runner's), after the cgroup is joined:
        # `ip netns exec` mounts that namespace's own /sys (where MPI's transports look for the
        # network devices) over the host's, cgroup files included.
        prefix += ["ip", "netns", "exec", netns]
    if drop_to_uid is not None:
        prefix += ["setpriv", f"--reuid={drop_to_uid}", f"--regid={drop_to_uid}",
                   "--clear-groups", "--no-new-privs"]
    return prefix


class HostRunning(Running):
    """A host subprocess (bwrap, plain process, apptainer) with output cap, watchdog and cgroup."""

    def __init__(self, argv: list[str], *, env: dict[str, str] | None, cwd: Path,
                 limits: Limits, cg: cgroups.RunCgroup, watch_dir: Path | None) -> None:
        self._cg = cg
        self._limits = limits
        self._watch_dir = watch_dir
        self.clock = WallClock(limits.wall_s)
        self.info = ExitInfo(returncode=None)
        self._ended = False
        self._lock = threading.Lock()
        self._proc = subprocess.Popen(
            argv, env=env if env is not None else {"PATH": "/usr/bin:/bin"}, cwd=cwd,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._out = OutputCollector(limits.output_bytes, self.kill)
        assert self._proc.stdout is not None
        threading.Thread(target=self._out.pump, args=(self._proc.stdout,), daemon=True).start()
        self._stop = threading.Event()
        threading.Thread(target=self._watchdog, daemon=True).start()

    def _watchdog(self) -> None:
        while not self._stop.wait(0.5):
            if self._proc.poll() is not None:
                return
            if self.clock.expired():
                self.info.timed_out = True
                self.kill()
                return
            cap = self._limits.disk_bytes
            if self._watch_dir is not None and dir_size(self._watch_dir, cap) > cap:
                self.info.disk_exceeded = True
                self.kill()
                return

    def alive(self) -> bool:
        return self._proc.poll() is None

    def cpu_seconds(self) -> float | None:
        # One source for the run's whole life: a delta across two sources would mean nothing.
        if self._cg.cpu_dir is not None:
            ns = self._cg.cpu_ns()
            return None if ns is None else ns / 1e9
        return tree_cpu_seconds(self._proc.pid)

    def pids(self) -> set[int] | None:
        return self._cg.pids() if self._cg.procs_files else tree_pids(self._proc.pid)

    def freeze(self, frozen: bool) -> bool:
        if not self._cg.freeze(frozen):
            return False
        self.clock.pause() if frozen else self.clock.resume()
        return True

    def kill(self) -> None:
        with self._lock:
            if self._cg.freezer_dir is not None:  # a frozen task takes SIGKILL only once thawed
                self._cg.freeze(False)
            if self._proc.poll() is None:
                # Inside first, so that the outer process reaps its children (killing it first
                # would orphan the sandbox's init to a host pid 1 that may never reap it).
                inner = self._cg.pids() - {self._proc.pid}
                for pid in inner:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                if inner:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self._proc.wait(0.2)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self._proc.pid, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError):
                    self._proc.kill()
            self._cg.kill_all()

    def wait(self, timeout: float | None = None) -> ExitInfo | None:
        if self._ended:  # asked again (a gang polls its nodes, then waits for them)
            return self.info
        try:
            rc = self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._ended = True  # its cgroup is removed below: what it measured is kept, not reread
        self._stop.set()
        if self._cg.cpu_dir is not None:  # before the cgroup goes (the tree is gone already)
            self.info.cpu_s = self.cpu_seconds()
        self._cg.kill_all()  # whatever the program left behind
        self._out.done.wait(5)
        self.info.returncode = rc
        self.info.output_exceeded = self._out.exceeded
        self.info.output_excerpt = self._out.excerpt()
        self.info.output_bytes = self._out.total
        self.info.oom_killed = self._cg.oom_killed()
        self.info.wall_s = time.monotonic() - self.clock.started
        self._cg.remove()
        return self.info
