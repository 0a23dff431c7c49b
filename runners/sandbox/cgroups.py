"""Per-run control groups: memory, pids and cpuset limits where the host lets us create them.

cgroup v1 (one hierarchy per controller), v2 (unified) and none are detected at run time; every
failure to create or configure one degrades to rlimits and is reported, never fatal.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


def _own_paths() -> dict[str, str]:
    """controller -> our cgroup path, from /proc/self/cgroup ('' is the v2 entry)."""
    paths: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            paths[c] = path
    return paths


def _write(path: Path, value: str) -> None:
    path.write_text(value)


@dataclass
class RunCgroup:
    """The cgroups of one sandboxed run; attach by writing a pid to every `procs_files`."""

    dirs: list[Path] = field(default_factory=list)
    procs_files: list[Path] = field(default_factory=list)
    memory_dir: Path | None = None
    freezer_dir: Path | None = None
    cpu_dir: Path | None = None  # v1 cpuacct, or the v2 group (cpu.stat is always there)
    version: int = 0
    enforced: list[str] = field(default_factory=list)
    frozen: bool = False

    def oom_killed(self) -> bool:
        """True when the kernel OOM-killed something in this run."""
        if self.memory_dir is None:
            return False
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        with contextlib.suppress(OSError):
            for line in (self.memory_dir / name).read_text().splitlines():
                key, _, val = line.partition(" ")
                if key == "oom_kill" and int(val) > 0:
                    return True
        if self.version == 1:
            with contextlib.suppress(OSError, ValueError):
                return int((self.memory_dir / "memory.failcnt").read_text()) > 0
        return False

    def cpu_ns(self) -> int | None:
        """CPU time every process of the run used so far (all threads, children and ranks, the
        reaped ones included), in nanoseconds; None where no CPU accounting exists."""
        if self.cpu_dir is None:
            return None
        try:
            if self.version == 1:
                return int((self.cpu_dir / "cpuacct.usage").read_text())
            for line in (self.cpu_dir / "cpu.stat").read_text().splitlines():
                key, _, val = line.partition(" ")
                if key == "usage_usec":
                    return int(val) * 1000
        except (OSError, ValueError):
            return None
        return None

    def pids(self) -> set[int]:
        found: set[int] = set()
        for f in self.procs_files:
            with contextlib.suppress(OSError, ValueError):
                found |= {int(x) for x in f.read_text().split()}
        return found

    def freeze(self, frozen: bool) -> bool:
        """Stop (or restart) every process of the run at once; False where no freezer exists.

        Returns once the kernel reports the whole group in the new state: a frozen group uses no
        CPU at all, whatever threads or children it has. A freeze the kernel does not complete
        in time is undone (False); a thaw is always attempted."""
        d = self.freezer_dir
        if d is None:
            return False
        if self._set_frozen(d, frozen):
            self.frozen = frozen
            return True
        if frozen:
            self._set_frozen(d, False)
        return False

    def _set_frozen(self, d: Path, frozen: bool) -> bool:
        if self.version == 1:
            control, events = d / "freezer.state", d / "freezer.state"
            request = want = "FROZEN" if frozen else "THAWED"
        else:
            control, events = d / "cgroup.freeze", d / "cgroup.events"
            request, want = str(int(frozen)), f"frozen {int(frozen)}"
        try:
            _write(control, request)
            deadline = time.monotonic() + 5
            while want not in events.read_text():
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.001)
        except OSError:
            return False
        return True

    def kill_all(self) -> None:
        """SIGKILL everything left in the run (v1 has no cgroup.kill)."""
        if self.freezer_dir is not None:  # a frozen task takes its SIGKILL only once thawed
            self.freeze(False)
        for _ in range(50):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self) -> None:
        self.kill_all()
        for d in reversed(self.dirs):
            for _ in range(100):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


@functools.cache
def probe() -> tuple[bool, bool]:
    """(a cpuset holds, a freezer exists) for the runs this host lets us make; asked once."""
    cg = create(memory_bytes=1 << 30, pids_max=8, cpus=sorted(os.sched_getaffinity(0))[:1])
    try:
        return any("cpuset" in e for e in cg.enforced), cg.freezer_dir is not None
    finally:
        cg.remove()


def _release(d: Path) -> bool:
    """Thaw a frozen run cgroup and kill what is in it (True: it was frozen): a runner killed
    while timing left its sandbox frozen, and a frozen process cannot die, not even by SIGKILL,
    until it is thawed."""
    for state in (d / "freezer.state", d / "cgroup.freeze"):  # v1, v2
        if state.is_file() and state.read_text().strip() in ("FROZEN", "FREEZING", "1"):
            state.write_text("THAWED" if state.name == "freezer.state" else "0")
            for pid in (d / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    os.kill(int(pid), signal.SIGKILL)
            return True
    return False


def sweep(*, older_than_s: float = 600) -> int:
    """Remove the run cgroups a killed runner left behind (any controller, v1 or v2), thawing
    and killing a frozen sandbox first; only old ones, so that a run another runner is starting
    right now is never touched (a live run is frozen for seconds, never for minutes). Returns
    how many went."""
    own = _own_paths()
    parents = {ROOT / c / own[c].lstrip("/")
               for c in ("memory", "pids", "cpuset", "freezer", "cpuacct")
               if c in own and (ROOT / c).is_dir()}
    if (ROOT / "cgroup.controllers").is_file() and "" in own:
        parents.add(ROOT / own[""].lstrip("/"))
    cutoff = time.time() - older_than_s
    old: list[Path] = []
    for parent in parents:
        with contextlib.suppress(OSError):
            old += [d for d in parent.glob("paragrade-*") if d.stat().st_mtime < cutoff]
    released = False
    for d in old:  # every frozen one first: its processes are in the other controllers too
        with contextlib.suppress(OSError):
            released = _release(d) or released
    gone = 0
    for d in old:
        with contextlib.suppress(OSError):
            for _ in range(50 if released else 0):  # killed processes leave within moments
                if not (d / "cgroup.procs").read_text().strip():
                    break
                time.sleep(0.02)
            d.rmdir()  # refused (EBUSY) while anything still runs in it
            gone += 1
    return gone


def create(*, memory_bytes: int, pids_max: int, cpus: list[int]) -> RunCgroup:
    """Make this run's cgroups; whatever cannot be made is simply not in `enforced`."""
    run = RunCgroup()
    name = f"paragrade-{uuid.uuid4().hex[:12]}"
    own = _own_paths()
    if (ROOT / "memory").is_dir() or (ROOT / "pids").is_dir():
        run.version = 1
        for controller in ("memory", "pids", "cpuset", "freezer", "cpuacct"):
            base = ROOT / controller
            if not base.is_dir() or controller not in own:
                continue
            d = base / own[controller].lstrip("/") / name
            try:
                d.mkdir()
            except OSError:
                continue
            run.dirs.append(d)
            try:
                if controller == "memory":
                    _write(d / "memory.limit_in_bytes", str(memory_bytes))
                    if (d / "memory.memsw.limit_in_bytes").exists():
                        _write(d / "memory.memsw.limit_in_bytes", str(memory_bytes))
                    run.memory_dir = d
                elif controller == "pids":
                    _write(d / "pids.max", str(pids_max))
                elif controller == "freezer":  # no limit: timing freezes an idle side
                    run.freezer_dir = d
                    run.procs_files.append(d / "cgroup.procs")
                    continue
                elif controller == "cpuacct":  # no limit: timing reads the run's CPU time
                    if (d / "cpuacct.usage").is_file():
                        run.cpu_dir = d
                    run.procs_files.append(d / "cgroup.procs")
                    continue
                else:
                    _write(d / "cpuset.mems", (d.parent / "cpuset.mems").read_text().strip())
                    _write(d / "cpuset.cpus", ",".join(map(str, cpus)))
            except OSError:
                continue
            run.procs_files.append(d / "cgroup.procs")
            run.enforced.append(f"cgroup-v1 {controller}")
    elif (ROOT / "cgroup.controllers").is_file() and "" in own:
        run.version = 2
        parent = ROOT / own[""].lstrip("/")
        d = parent / name
        try:
            d.mkdir()
            run.dirs.append(d)
            available = set((d / "cgroup.controllers").read_text().split())
            if "memory" in available:
                _write(d / "memory.max", str(memory_bytes))
                _write(d / "memory.swap.max", "0") if (d / "memory.swap.max").exists() else None
                run.memory_dir = d
                run.enforced.append("cgroup-v2 memory")
            if "pids" in available:
                _write(d / "pids.max", str(pids_max))
                run.enforced.append("cgroup-v2 pids")
            if "cpuset" in available:
                _write(d / "cpuset.cpus", ",".join(map(str, cpus)))
                run.enforced.append("cgroup-v2 cpuset")
            if (d / "cgroup.freeze").exists():
                run.freezer_dir = d
            if (d / "cpu.stat").exists():
                run.cpu_dir = d
            run.procs_files.append(d / "cgroup.procs")
        except OSError:
            run.freezer_dir = None
            run.cpu_dir = None
            run.enforced = []
            run.procs_files = []
    return run
