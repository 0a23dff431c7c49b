"""Apptainer (HPC nodes): an image run with --containall, user namespace mode, and no network."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
from pathlib import Path

from runners.sandbox import cgroups
from runners.sandbox.base import Executor, HostRunning, Running, SandboxSpec, host_prefix

HOST_WRAPPER_MARK = b"paragrade-apptainer-host"
"""In the first lines of containers/apptainer-host/apptainer: a binary that carries it drops to the
sandbox user itself, after entering its root file system (which needs root)."""


@functools.cache
def is_host_wrapper(binary: str) -> bool:
    """Whether `binary` is paragrade's wrapper for hosts without an apptainer package."""
    path = shutil.which(binary) or binary
    with contextlib.suppress(OSError), open(path, "rb") as fh:
        return HOST_WRAPPER_MARK in fh.read(512)
    return False


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
        return ["container: --containall, user namespace, network namespace with no interfaces",
                "read-only image",
                "cgroup memory pids cpuset (from outside)", "rlimits", "wall-clock limit",
                "output cap"]

    def command(self, spec: SandboxSpec) -> list[str]:
        """The apptainer command line, without the host prefix (cgroup, rlimits, user)."""
        # --userns: unprivileged mode whatever the site's install (a setuid starter could not
        # work under our no-new-privileges anyway); --network none: an empty network namespace.
        # --quiet: apptainer's notices would land in the submission's output. No
        # --writable-tmpfs: the image stays read-only, as the other backends' systems; /tmp and
        # the work dir are the places to write.
        args = [self.binary, "--quiet", "exec", "--userns", "--containall", "--cleanenv",
                "--no-home", "--net", "--network", "none"]
        if spec.limits.gpus:
            args.append("--nv")
        for m in [*spec.mounts, spec.workdir]:
            args += ["--bind", f"{m.host}:{m.inside}:{'rw' if m.writable else 'ro'}"]
        args += ["--pwd", spec.workdir.inside, self.image_path]
        # The program gets the session's environment and nothing else: apptainer adds its own
        # variables and the image's (its runner settings, a PATH without the runtime) otherwise.
        return [*args, "/usr/bin/env", "-i", *(f"{k}={v}" for k, v in spec.env.items()),
                *spec.argv]

    def start(self, spec: SandboxSpec) -> Running:
        limits = spec.limits
        cg = cgroups.create(memory_bytes=limits.memory_mb * 1024 * 1024,
                            pids_max=limits.pids, cpus=list(limits.cpus))
        argv = self.command(spec)
        if is_host_wrapper(self.binary) and os.getuid() == 0:
            # The wrapper enters apptainer's root file system as root, then drops to the sandbox
            # user (with the same process cap) itself; the cgroup, the other rlimits and the
            # affinity still come from outside, so CPU time is read from outside too.
            prefix = host_prefix(limits, cg, drop_to_uid=None)
            argv = [argv[0], "--as-uid", str(self.sandbox_uid), "--nproc", str(limits.pids),
                    *argv[1:]]
        else:
            prefix = host_prefix(limits, cg, drop_to_uid=self.sandbox_uid if os.getuid() == 0
                                 else None)
        return HostRunning(prefix + argv, env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
                           cwd=Path(spec.workdir.host), limits=limits, cg=cg,
                           watch_dir=spec.workdir.host)
