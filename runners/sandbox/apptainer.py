"""Apptainer (HPC nodes): a SIF image run with --containall and no network namespace access."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from runners.sandbox import cgroups
from runners.sandbox.base import Executor, HostRunning, Running, SandboxSpec, host_prefix


class ApptainerExecutor(Executor):
    name = "apptainer"

    def __init__(self, *, image: str, binary: str = "apptainer", sandbox_uid: int = 65534) -> None:
        self.image_path = image
        self.binary = binary
        self.sandbox_uid = sandbox_uid

    def image(self) -> str | None:
        return self.image_path

    @staticmethod
    def available(binary: str = "apptainer") -> bool:
        return shutil.which(binary) is not None

    def isolation(self) -> list[str]:
        return ["container: --containall, network namespace with no interfaces", "rlimits",
                "wall-clock limit", "output cap"]

    def command(self, spec: SandboxSpec) -> list[str]:
        """The apptainer command line, without the host prefix (cgroup, rlimits, user)."""
        args = [self.binary, "exec", "--containall", "--cleanenv", "--no-home",
                "--net", "--network", "none", "--writable-tmpfs"]
        if spec.limits.gpus:
            args.append("--nv")
        for m in [*spec.mounts, spec.workdir]:
            args += ["--bind", f"{m.host}:{m.inside}:{'rw' if m.writable else 'ro'}"]
        args += ["--pwd", spec.workdir.inside]
        for key, value in spec.env.items():
            args += ["--env", f"{key}={value}"]
        return [*args, self.image_path, *spec.argv]

    def start(self, spec: SandboxSpec) -> Running:
        limits = spec.limits
        cg = cgroups.create(memory_bytes=limits.memory_mb * 1024 * 1024,
                            pids_max=limits.pids, cpus=list(limits.cpus))
        drop = self.sandbox_uid if os.getuid() == 0 else None
        argv = host_prefix(limits, cg, drop_to_uid=drop) + self.command(spec)
        return HostRunning(argv, env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
                           cwd=Path(spec.workdir.host), limits=limits, cg=cg,
                           watch_dir=spec.workdir.host)
