"""Runs inside the sandbox for a grading's tests: forks a fresh child per test.

The zygote itself runs only trusted code: the harness and the libraries the grader names (those
the package's reference imports), never the submission. Each test's child is forked from it and
imports the submission as a fresh sandbox would, so a test pays the submission's import but not
the interpreter's start nor its libraries'. Between two tests the zygote puts the sandbox back as
it found it, and says whether it could:

- every other process in the sandbox's PID namespace is killed (`kill(-1)`) and reaped (the
  zygote is their subreaper), so nothing a test started lives on;
- every file, folder, socket or FIFO a test added to a writable mount (/tmp, the work dir,
  /dev/shm, /dev …) is removed, and what was there at the start must be exactly as it was (type,
  inode, mode, size, link target, modification time); anything else is "not clean";
- System V IPC objects are removed and the user and session keyrings cleared (POSIX message
  queues cannot be made: the sandbox's RLIMIT_MSGQUEUE is 0).

The zygote is not dumpable, so a child (same user) can neither ptrace it nor open its memory or
file descriptors. A child may still kill or stop it: the grader then sees no answer, discards
this sandbox and starts the next test in a new one. Whatever is not clean gets the same.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import importlib.util
import os
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
KEYCTL_CLEAR = 7
KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING = -3, -4, -5
SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}
IPC_RMID = 0
CHILD_EXIT_S = 1.0
# Kernel file systems that hold no test's state (or that no test may write).
NOT_STATE = {"proc", "sysfs", "devpts", "cgroup", "cgroup2", "securityfs", "debugfs", "bpf",
             "tracefs", "fusectl", "configfs", "pstore", "hugetlbfs", "nsfs", "binfmt_misc"}

Send = Callable[[socket.socket, Any], None]
Recv = Callable[[socket.socket], Any]


def _sibling(name: str) -> Any:
    """A module of this folder, loaded by its path as the worker loads this one."""
    if name not in _siblings:
        spec = importlib.util.spec_from_file_location(
            f"paragrade_{name}", os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _siblings[name] = module
    return _siblings[name]


_siblings: dict[str, Any] = {}


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def writable_mounts() -> list[str]:
    """Mount points mounted read-write whose file system can hold state, outermost first."""
    points = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            sep = fields.index("-")
            # Read-write as a mount and as a file system: apptainer's root is an overlay mounted
            # rw whose file system is read-only (walking its whole image would take seconds).
            writable = "rw" in fields[5].split(",") and "rw" in fields[sep + 3].split(",")
            if writable and fields[sep + 1] not in NOT_STATE:
                points.append(fields[4].encode().decode("unicode_escape"))
    return sorted(set(points), key=len)


def _describe(st: os.stat_result, path: str) -> tuple[Any, ...]:
    kind = stat.S_IFMT(st.st_mode)
    if kind == stat.S_IFDIR:  # its mtime moves when entries come and go: those are checked
        return (kind, st.st_ino, st.st_mode, st.st_uid)
    if kind in (stat.S_IFCHR, stat.S_IFBLK):  # a tty's times move with use; its node is the state
        return (kind, st.st_mode, st.st_rdev)
    target = os.readlink(path) if kind == stat.S_IFLNK else None
    return (kind, st.st_ino, st.st_mode, st.st_uid, st.st_size, st.st_mtime_ns, target)


def snapshot(points: list[str], skip: set[str]) -> dict[str, tuple[Any, ...]]:
    """Every entry under the writable mounts (each walked on its own device)."""
    seen: dict[str, tuple[Any, ...]] = {}
    for top in points:
        if top in skip or top in seen:
            continue
        try:
            st = os.lstat(top)
        except OSError:
            continue
        seen[top] = _describe(st, top)
        if not stat.S_ISDIR(st.st_mode):
            continue
        todo = [top]
        while todo:
            folder = todo.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError:
                seen[folder + "/\0unreadable"] = ()  # never equal to a readable start
                continue
            for entry in entries:
                path = entry.path
                if path in skip or (path in points and path != top):
                    continue
                try:
                    est = os.lstat(path)
                except OSError:
                    continue
                seen[path] = _describe(est, path)
                if stat.S_ISDIR(est.st_mode) and est.st_dev == st.st_dev:
                    todo.append(path)
    return seen


def _remove(path: str) -> None:
    """Remove a file or a whole folder that a test made, whatever modes it set."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        try:
            os.unlink(path)
        except PermissionError:
            os.chmod(os.path.dirname(path), 0o700)
            os.unlink(path)
        return
    os.chmod(path, 0o700)
    for entry in os.listdir(path):
        _remove(os.path.join(path, entry))
    os.rmdir(path)


def kill_the_rest() -> None:
    """Kill every other process of the sandbox and reap what comes back to us (their wait
    statuses in `_statuses`)."""
    me = os.getpid()
    for _ in range(2000):
        _reap()
        if not [p for p in _pids() if p not in (1, me)]:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)  # every process we may signal but init and ourselves
        time.sleep(0.002)
    raise RuntimeError("processes outlived SIGKILL")


_statuses: dict[int, int] = {}


def _reap() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _statuses[pid] = status


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def clear_ipc() -> None:
    """Remove the System V IPC objects a test made; clear the keyrings a child could fill."""
    libc = _libc()
    for kind, remove in (("shm", libc.shmctl), ("sem", libc.semctl), ("msg", libc.msgctl)):
        try:
            with open(f"/proc/sysvipc/{kind}") as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            ident = int(row.split()[1])
            if kind == "sem":
                remove(ident, 0, IPC_RMID)
            else:
                remove(ident, IPC_RMID, None)
    nr = SYS_KEYCTL.get(os.uname().machine)
    if nr is not None:
        for ring in (KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING,
                     KEY_SPEC_USER_SESSION_KEYRING):
            libc.syscall(nr, KEYCTL_CLEAR, ring)  # ENOKEY / EPERM / ENOSYS: nothing to clear


def ipc_left() -> int:
    left = 0
    for kind in ("shm", "sem", "msg"):
        try:
            with open(f"/proc/sysvipc/{kind}") as fh:
                left += len(fh.read().splitlines()) - 1
        except OSError:
            continue
    return left


class Zygote:
    def __init__(self, socket_path: str, result: str | None, preload: list[str], *,
                 send: Send, recv: Recv, code_root: str | None = None) -> None:
        self.socket_path = socket_path
        self.skip = {result} if result else set()
        self.preload = preload
        self.send = send
        self.recv = recv
        self.code_root = code_root  # the submission's folder: numba's code from it is cached
        self.jit_cache: tuple[str, int] | None = None

    def run(self, serve: Callable[[str], int]) -> int:
        failed = []
        for name in self.preload:
            try:
                importlib.import_module(name)
            except Exception:  # the test's child imports it again and meets the error there
                failed.append(name)
        if self.code_root is not None:
            self.jit_cache = _sibling("jitcache").install(self.code_root)
            if self.jit_cache is not None:
                self.skip.add(self.jit_cache[0])
        libc = _libc()
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(self.socket_path)
        if threading.active_count() > 1:  # forking would copy a thread's half-done state
            self.send(sock, {"zygote": False, "why": "a preloaded module started a thread"})
            return 1
        points = writable_mounts()
        start = snapshot(points, self.skip)
        self.send(sock, {"zygote": True, "preloaded": [m for m in self.preload if m not in failed]})
        child = 0
        while True:
            try:
                request = self.recv(sock)
            except EOFError:
                return 0
            op = request.get("op")
            if op == "fork":
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    code = 70
                    try:
                        sock.close()
                        libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # as a fresh process is
                        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
                        code = serve(str(request["socket"]))
                    finally:
                        for stream in (sys.stdout, sys.stderr):  # as an interpreter's exit does
                            with contextlib.suppress(Exception):
                                stream.flush()
                        os._exit(code)
                child = pid
                self.send(sock, {"pid": pid})
            elif op == "reset":
                self.send(sock, self.reset(start, points, child))
                child = 0
            else:
                return 0

    def reset(self, start: dict[str, tuple[Any, ...]], points: list[str],
              child: int) -> dict[str, Any]:
        """Put the sandbox back as it was before the first test; say whether it is."""
        deadline = time.monotonic() + CHILD_EXIT_S
        while child and child not in _statuses and time.monotonic() < deadline:
            _reap()  # told to exit, it flushes its output first
            time.sleep(0.001)
        try:
            kill_the_rest()
        except RuntimeError as exc:
            return {"clean": False, "why": str(exc)}
        status = _statuses.pop(child, None) if child else None
        _statuses.clear()
        if self.jit_cache is not None:
            try:
                why = _sibling("jitcache").tidy(*self.jit_cache, _remove)
            except OSError as exc:
                why = f"cannot tidy the compiled-code cache: {exc}"
            if why:
                return {"clean": False, "why": why}
        now = snapshot(points, self.skip)
        added = sorted((p for p in now if p not in start), key=len)
        try:
            for path in added:
                if os.path.lexists(path):
                    _remove(path)
            clear_ipc()
        except OSError as exc:
            return {"clean": False, "why": f"cannot remove what a test left: {exc}"}
        now = snapshot(points, self.skip)
        if now != start:
            changed = sorted(p for p in set(now) | set(start) if now.get(p) != start.get(p))
            return {"clean": False, "why": f"changed: {changed[:3]}"}
        if ipc_left():
            return {"clean": False, "why": "System V IPC objects left"}
        return {"clean": True, "status": status}
