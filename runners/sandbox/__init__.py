"""Executor backends behind one interface: bwrap (default), process (unsafe), docker, apptainer."""

from __future__ import annotations

from runners.protocol.backends import SANDBOX_BACKENDS
from runners.sandbox.base import Executor, ExitInfo, Limits, Mount, Running, SandboxSpec
from runners.settings import RunnerSettings

__all__ = ["BackendUnavailable", "Executor", "ExitInfo", "Limits", "Mount", "Running", "SandboxSpec",
           "create_executor"]


class BackendUnavailable(RuntimeError):
    """The requested backend cannot run on this host."""


def create_executor(settings: RunnerSettings, name: str | None = None) -> Executor:
    """The backend named (or the settings' choice; 'auto' = bwrap). The unsafe 'process'
    backend is used only when named: falling back to it silently would let submissions read
    the runner's files (its secrets, other uploads) as its own user."""
    from runners.sandbox.apptainer import ApptainerExecutor
    from runners.sandbox.bwrap import BwrapExecutor
    from runners.sandbox.docker import DockerExecutor
    from runners.sandbox.process import ProcessExecutor

    name = name or settings.backend
    if name in ("auto", "bwrap") and not BwrapExecutor.available():
        raise BackendUnavailable("bwrap is not installed (apt-get install bubblewrap); "
                                 "PARAGRADE_BACKEND=process grades without a sandbox (UNSAFE)")
    if name in ("auto", "bwrap"):
        return BwrapExecutor(runtime_dir=settings.runtime_dir, sandbox_uid=settings.sandbox_uid)
    if name == "process":
        return ProcessExecutor(runtime_dir=settings.runtime_dir, sandbox_uid=settings.sandbox_uid)
    if name == "docker":
        docker = DockerExecutor(image=settings.docker_image, base_url=settings.docker_url,
                                sandbox_uid=settings.sandbox_uid)
        if why := docker.unavailable():
            raise BackendUnavailable(why)
        return docker
    if name == "apptainer":
        if not settings.apptainer_image:
            raise BackendUnavailable("set PARAGRADE_APPTAINER_IMAGE to a .sif image")
        return ApptainerExecutor(image=settings.apptainer_image, binary=settings.apptainer_bin,
                                 sandbox_uid=settings.sandbox_uid)
    raise BackendUnavailable(f"unknown backend {name!r} (one of: {', '.join(SANDBOX_BACKENDS)})")
