"""OCI containers through the Docker API (Docker Engine, or podman's compatible service)."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from runners.sandbox.base import (
    Executor,
    ExitInfo,
    OutputCollector,
    Running,
    SandboxSpec,
    dir_size,
)


class DockerExecutor(Executor):
    """No network, every capability dropped, read-only root, limits from the spec."""

    name = "docker"

    def __init__(self, *, image: str, base_url: str | None = None, sandbox_uid: int = 65534) -> None:
        self.image = image
        self.base_url = base_url
        self.sandbox_uid = sandbox_uid
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            import docker

            self._client = (docker.DockerClient(base_url=self.base_url) if self.base_url
                            else docker.from_env())
        return self._client

    def isolation(self) -> list[str]:
        return ["container: network none, caps dropped, read-only root, no-new-privileges",
                "cgroup memory pids cpuset", "wall-clock limit", "output cap"]

    def run_kwargs(self, spec: SandboxSpec) -> dict[str, Any]:
        """Arguments to `containers.run` for this spec (pure: tested without an engine)."""
        from docker.types import DeviceRequest, Ulimit

        lim = spec.limits
        mem = f"{lim.memory_mb}m"
        volumes = {str(m.host): {"bind": m.inside, "mode": "rw" if m.writable else "ro"}
                   for m in [*spec.mounts, spec.workdir]}
        kwargs: dict[str, Any] = dict(
            image=self.image, command=spec.argv, detach=True, environment=dict(spec.env),
            working_dir=spec.workdir.inside, user=f"{self.sandbox_uid}:{self.sandbox_uid}",
            network_mode="none", cap_drop=["ALL"], security_opt=["no-new-privileges"],
            read_only=True, mem_limit=mem, memswap_limit=mem, pids_limit=lim.pids,
            cpuset_cpus=",".join(map(str, lim.cpus)), volumes=volumes,
            tmpfs={"/tmp": "rw,nosuid,size=256m", "/dev/shm": "rw,nosuid,size=256m"},
            # Passing ulimits replaces the engine's defaults: nproc must be listed too.
            ulimits=[Ulimit(name="nofile", soft=lim.nofile, hard=lim.nofile),
                     Ulimit(name="nproc", soft=lim.pids, hard=lim.pids),
                     Ulimit(name="fsize", soft=lim.fsize_bytes, hard=lim.fsize_bytes),
                     Ulimit(name="core", soft=0, hard=0)],
            labels={"paragrade.run": "1"},
        )
        if lim.gpus:
            kwargs["device_requests"] = [DeviceRequest(count=lim.gpus, capabilities=[["gpu"]])]
        return kwargs

    def start(self, spec: SandboxSpec) -> Running:
        return DockerRunning(self, spec)


class DockerRunning(Running):
    def __init__(self, executor: DockerExecutor, spec: SandboxSpec) -> None:
        self._spec = spec
        self._started = time.monotonic()
        self.info = ExitInfo(returncode=None)
        self._container = executor.client.containers.run(**executor.run_kwargs(spec))
        self._out = OutputCollector(spec.limits.output_bytes, self.kill)
        stream = self._container.logs(stream=True, follow=True, stdout=True, stderr=True)
        threading.Thread(target=self._out.pump, args=(stream,), daemon=True).start()
        self._stop = threading.Event()
        threading.Thread(target=self._watchdog, daemon=True).start()

    def _watchdog(self) -> None:
        deadline = self._started + self._spec.limits.wall_s
        while not self._stop.wait(0.5):
            if time.monotonic() > deadline:
                self.info.timed_out = True
                self.kill()
                return
            if dir_size(self._spec.workdir.host, self._spec.limits.disk_bytes) > \
                    self._spec.limits.disk_bytes:
                self.info.disk_exceeded = True
                self.kill()
                return

    def alive(self) -> bool:
        with contextlib.suppress(Exception):
            self._container.reload()
            return bool(self._container.status in ("created", "running"))
        return False

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self._container.kill()

    def wait(self, timeout: float | None = None) -> ExitInfo | None:
        import requests

        try:
            result = self._container.wait(timeout=timeout)
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            return None
        self._stop.set()
        self._out.done.wait(5)
        with contextlib.suppress(Exception):
            self._container.reload()
            self.info.oom_killed = bool(self._container.attrs["State"].get("OOMKilled"))
        self.info.returncode = int(result.get("StatusCode", -1))
        self.info.output_exceeded = self._out.exceeded
        self.info.output_excerpt = self._out.excerpt()
        self.info.output_bytes = self._out.total
        self.info.wall_s = time.monotonic() - self._started
        with contextlib.suppress(Exception):
            self._container.remove(force=True)
        return self.info
