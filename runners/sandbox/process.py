"""Plain processes with rlimits (and cgroups where possible): for hosts without bwrap. UNSAFE.

No namespaces: the program sees the host's files and network. Every report graded this way says
so; never use it for untrusted code on a shared machine.
"""

from __future__ import annotations

import os
from pathlib import Path

from runners.sandbox import cgroups
from runners.sandbox.base import Executor, HostRunning, Mount, Running, SandboxSpec, host_prefix


class ProcessExecutor(Executor):
    name = "process"
    sandboxed = False
    pid_namespace = False  # the runner's own processes share the sandbox user's: no zygote

    def __init__(self, *, runtime_dir: Path, sandbox_uid: int = 65534) -> None:
        self.runtime_dir = runtime_dir
        self.sandbox_uid = sandbox_uid

    def path(self, mount: Mount) -> str:
        return str(mount.host)

    def isolation(self) -> list[str]:
        return ["rlimits: nofile fsize core nproc", "wall-clock limit", "output cap",
                "UNSAFE: no namespaces, host files and network visible"]

    def start(self, spec: SandboxSpec) -> Running:
        limits = spec.limits
        cg = cgroups.create(memory_bytes=limits.memory_mb * 1024 * 1024,
                            pids_max=limits.pids, cpus=list(limits.cpus))
        drop = self.sandbox_uid if os.getuid() == 0 else None
        argv = host_prefix(limits, cg, drop_to_uid=drop) + spec.argv
        return HostRunning(argv, env=dict(spec.env), cwd=spec.workdir.host, limits=limits,
                           cg=cg, watch_dir=spec.workdir.host)
