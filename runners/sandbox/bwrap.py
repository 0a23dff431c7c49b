"""bubblewrap: namespaces (user, pid, ipc, net, uts, mount), a read-only system, no network."""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

from runners.sandbox import cgroups
from runners.sandbox.base import Executor, HostRunning, Running, SandboxSpec, host_prefix

# Files of /etc a Python program and MPICH's launcher read; never shadow, never the whole /etc.
ETC_FILES = ("hosts", "passwd", "group", "nsswitch.conf", "localtime", "ld.so.cache", "host.conf")


def system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("lib", "lib64", "bin", "sbin"):
        target = Path("/") / name
        if target.is_symlink():
            args += ["--symlink", os.readlink(target), f"/{name}"]
        elif target.is_dir():
            args += ["--ro-bind", str(target), f"/{name}"]
    for f in ETC_FILES:
        args += ["--ro-bind-try", f"/etc/{f}", f"/etc/{f}"]
    return args


class BwrapExecutor(Executor):
    """The default on Linux: runs as an unprivileged user inside fresh namespaces."""

    name = "bwrap"
    joins_netns = True

    def __init__(self, *, runtime_dir: Path, sandbox_uid: int = 65534) -> None:
        self.runtime_dir = runtime_dir
        self.sandbox_uid = sandbox_uid
        self.bwrap = shutil.which("bwrap") or "bwrap"

    @staticmethod
    def available() -> bool:
        return shutil.which("bwrap") is not None

    def isolation(self) -> list[str]:
        return ["namespaces: user pid ipc net uts mount", "no network", "read-only system",
                "rlimits: nofile fsize core nproc", "wall-clock limit", "output cap"]

    def command(self, spec: SandboxSpec) -> list[str]:
        """The bwrap command line, without the host prefix (cgroup, rlimits, user)."""
        args = [self.bwrap, "--unshare-all", "--die-with-parent", "--new-session"]
        if spec.netns is not None:  # the run's overlay namespace, entered by the host prefix
            args.append("--share-net")
        if spec.hostname is not None:
            args += ["--hostname", spec.hostname]
        if os.getuid() == 0 and self.sandbox_uid == 0:
            args += ["--cap-drop", "ALL"]
        args += system_binds()
        args += ["--ro-bind", "/sys", "/sys", "--proc", "/proc", "--dev", "/dev",
                 "--tmpfs", "/tmp", "--tmpfs", "/dev/shm"]
        if spec.limits.gpus:
            for dev in sorted(glob.glob("/dev/nvidia*")):
                args += ["--dev-bind", dev, dev]
        args += ["--ro-bind", str(self.runtime_dir), str(self.runtime_dir)]
        for m in [*spec.mounts, spec.workdir]:
            args += ["--bind" if m.writable else "--ro-bind", str(m.host), m.inside]
        args += ["--remount-ro", "/", "--chdir", spec.workdir.inside, "--clearenv"]
        for key, value in spec.env.items():
            args += ["--setenv", key, value]
        return [*args, "--", *spec.argv]

    def start(self, spec: SandboxSpec) -> Running:
        limits = spec.limits
        cg = cgroups.create(memory_bytes=limits.memory_mb * 1024 * 1024,
                            pids_max=limits.pids, cpus=list(limits.cpus))
        drop = self.sandbox_uid if os.getuid() == 0 else None
        argv = host_prefix(limits, cg, drop_to_uid=drop, netns=spec.netns) + self.command(spec)
        return HostRunning(argv, env=None, cwd=spec.workdir.host, limits=limits, cg=cg,
                           watch_dir=spec.workdir.host)
