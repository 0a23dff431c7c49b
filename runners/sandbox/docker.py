"""OCI containers through the Docker API (Docker Engine, or podman's compatible service)."""

from __future__ import annotations

import contextlib
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from runners.sandbox.base import (
    Executor,
    ExitInfo,
    OutputCollector,
    Running,
    SandboxSpec,
    WallClock,
    dir_size,
)

EXIT_POLL_S = 0.5  # how often a silent container's state is asked (see _wait_for_exit)
SANDBOX_LABEL = "paragrade.run=1"  # on every sandbox container (sweep finds leftovers by it)


def _epoch(stamp: object) -> float | None:
    """Seconds since the epoch of an engine's RFC 3339 time, or None (unset: year 1)."""
    if not isinstance(stamp, str) or stamp.startswith("0001-"):
        return None
    try:
        return datetime.fromisoformat(stamp).timestamp()  # 3.11: Z and nanoseconds accepted
    except ValueError:
        return None


class DockerExecutor(Executor):
    """No network, every capability dropped, read-only root, limits from the spec."""

    name = "docker"

    def __init__(self, *, image: str, base_url: str | None = None, sandbox_uid: int = 65534) -> None:
        self.image_name = image
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

    def unavailable(self) -> str | None:
        """Why this executor cannot start sandboxes (no engine answers, no such image), or None."""
        import docker.errors
        import requests

        where = self.base_url or "DOCKER_HOST (default unix:///var/run/docker.sock)"
        try:
            self.client.images.get(self.image_name)
        except docker.errors.ImageNotFound:
            return (f"the engine at {where} has no image {self.image_name!r}: build it "
                    "(scripts/build-images.sh) or set PARAGRADE_DOCKER_IMAGE")
        except (docker.errors.DockerException, requests.RequestException) as exc:
            return f"no Docker API answers at {where} (PARAGRADE_DOCKER_URL): {exc}"
        return None

    def image(self) -> str | None:
        """NAME@DIGEST: the manifest's digest where the engine has one (pushed, pulled or, with
        podman, built), else the image id."""
        try:
            image = self.client.images.get(self.image_name)
        except Exception:  # no engine or no such image: the name is all we can tell
            return self.image_name
        digests = [d.partition("@")[2] for d in image.attrs.get("RepoDigests") or []]
        return f"{self.image_name}@{digests[0] if digests else image.id}"

    def isolation(self) -> list[str]:
        return ["container: network none, caps dropped, read-only root, no-new-privileges",
                "cgroup memory pids cpuset", "wall-clock limit", "output cap"]

    def sweep(self, min_age_s: float = 60) -> int:
        """Remove stopped sandbox containers (ours by label) that stopped over `min_age_s` ago: a
        runner killed while grading never removed them. Running ones, and ones that may still
        be collected by another runner on this engine, are left alone."""
        import docker.errors

        removed = 0
        now = time.time()
        for c in self.client.containers.list(all=True, filters={"label": SANDBOX_LABEL}):
            state = c.attrs.get("State") or {}
            if state.get("Status") in ("running", "paused", "restarting", "removing"):
                continue
            stopped = _epoch(state.get("FinishedAt")) or _epoch(c.attrs.get("Created"))
            if stopped is None or now - stopped < min_age_s:
                continue
            with contextlib.suppress(docker.errors.APIError):
                c.remove(force=True)
                removed += 1
        return removed

    def cpuset_enforced(self) -> bool:
        return True  # the engine's cpuset_cpus, whatever this runner (maybe in a container) sees

    def can_freeze(self) -> bool:
        return True  # the engine's pause; a refusal makes timing fall back (DockerRunning.freeze)

    def run_kwargs(self, spec: SandboxSpec) -> dict[str, Any]:
        """Arguments to `containers.run` for this spec (pure: tested without an engine)."""
        from docker.types import DeviceRequest, Ulimit

        lim = spec.limits
        mem = f"{lim.memory_mb}m"
        volumes = {str(m.host): {"bind": m.inside, "mode": "rw" if m.writable else "ro"}
                   for m in [*spec.mounts, spec.workdir]}
        kwargs: dict[str, Any] = dict(
            # The whole argv as the entrypoint: the runner image's own ENTRYPOINT (paragrade)
            # must not be prepended to a sandbox's program.
            image=self.image_name, entrypoint=list(spec.argv[:1]), command=list(spec.argv[1:]),
            detach=True, environment=dict(spec.env),
            working_dir=spec.workdir.inside, user=f"{self.sandbox_uid}:{self.sandbox_uid}",
            network_mode="none", cap_drop=["ALL"], security_opt=["no-new-privileges"],
            read_only=True, mem_limit=mem, memswap_limit=mem, pids_limit=lim.pids,
            cpuset_cpus=",".join(map(str, lim.cpus)), volumes=volumes,
            tmpfs={"/tmp": "rw,nosuid,size=256m", "/dev/shm": "rw,nosuid,size=256m"},
            # Passing ulimits replaces the engine's defaults: nproc must be listed too.
            ulimits=[Ulimit(name="nofile", soft=lim.nofile, hard=lim.nofile),
                     Ulimit(name="nproc", soft=lim.pids, hard=lim.pids),
                     Ulimit(name="fsize", soft=lim.fsize_bytes, hard=lim.fsize_bytes),
                     Ulimit(name="core", soft=0, hard=0),
                     Ulimit(name="msgqueue", soft=0, hard=0)],
            labels=dict([SANDBOX_LABEL.split("=")]),
        )
        if lim.gpus:
            kwargs["device_requests"] = [DeviceRequest(count=lim.gpus, capabilities=[["gpu"]])]
        return kwargs

    def start(self, spec: SandboxSpec) -> Running:
        return DockerRunning(self, spec)


def _container_cpu_file(container: Any) -> Path | None:
    """The CPU accounting file of a container's cgroup, when this process sees it (same host,
    same pid namespace); None otherwise."""
    from runners.sandbox.cgroups import ROOT

    with contextlib.suppress(Exception):
        container.reload()
        pid = int(container.attrs["State"]["Pid"])
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if container.id not in path:  # another pid namespace: not this container's process
                continue
            if "cpuacct" in controllers.split(","):
                f = ROOT / "cpuacct" / path.lstrip("/") / "cpuacct.usage"
            elif controllers == "":
                unified = ROOT if (ROOT / "cgroup.controllers").is_file() else ROOT / "unified"
                f = unified / path.lstrip("/") / "cpu.stat"
            else:
                continue
            if f.is_file():
                _read_cpu_file(f)
                return f
    return None


def _read_cpu_file(f: Path) -> float:
    text = f.read_text()
    if f.name == "cpuacct.usage":
        return int(text) / 1e9
    for line in text.splitlines():
        key, _, val = line.partition(" ")
        if key == "usage_usec":
            return int(val) / 1e6
    raise ValueError(f"no usage_usec in {f}")


class DockerRunning(Running):
    """A started container. One thread pumps its logs, one waits for its end, one is the watchdog.

    `alive()` is called on every read of the control socket (inside timed calls), so it must not
    cost an API round trip: a waiter thread blocks in the engine's wait and sets an event instead.
    """

    def __init__(self, executor: DockerExecutor, spec: SandboxSpec) -> None:
        self._spec = spec
        self._client = executor.client
        self.info = ExitInfo(returncode=None)
        self._exited = threading.Event()
        self._stop = threading.Event()
        self._status: int | None = None
        self._killed = False  # by us (limits, close): then an exit by SIGKILL is not an OOM kill
        self._collected = False
        self._cpu_file: Path | Literal[False] | None = None
        self._lock = threading.Lock()
        self._out = OutputCollector(spec.limits.output_bytes, self.kill)
        # create + start (not `containers.run`): a container that fails to start is removed, and a
        # missing image is an error here rather than an attempt to pull it.
        self._container = self._client.containers.create(**executor.run_kwargs(spec))
        self.clock = WallClock(spec.limits.wall_s)
        try:
            self._container.start()
        except BaseException:
            with contextlib.suppress(Exception):
                self._container.remove(force=True)
            raise
        threading.Thread(target=self._pump_logs, daemon=True).start()
        threading.Thread(target=self._wait_for_exit, daemon=True).start()
        threading.Thread(target=self._watchdog, daemon=True).start()

    def _pump_logs(self) -> None:
        import requests

        try:
            while True:
                try:
                    # podman's service sends the response headers only with the first output, so
                    # this blocks while the program is silent (and times out after the client's
                    # timeout, before anything was read: asking again duplicates nothing).
                    stream = self._container.logs(stream=True, follow=True, stdout=True, stderr=True)
                    break
                except requests.exceptions.ReadTimeout:
                    if self._exited.is_set():
                        return
            self._out.pump(stream)
        except Exception:  # the engine went away: wait() reports what it can
            pass
        finally:
            self._out.done.set()

    def _wait_for_exit(self) -> None:
        """Set `_exited` (and the status) once the container stops.

        Not the engine's wait: podman 4.3's compat wait spins a core for as long as it blocks
        (measured: 1.1 s of the service's CPU per second), which took a core from every timed
        run of a 2-core node. The end of the log stream says the program is gone at once; the
        container's state, asked every EXIT_POLL_S, covers a program that never printed (podman
        starts the stream only with the first output)."""
        quick_until: float | None = None
        try:
            while True:
                if not self._out.done.is_set():
                    self._out.done.wait(EXIT_POLL_S)
                else:
                    # Output closed: the engine marks the exit a moment later. Asked quickly for
                    # a second only: a program that closes its output but runs on must not
                    # make us load the engine (on the cores the other side is timed on).
                    quick_until = quick_until or time.monotonic() + 1
                    time.sleep(0.02 if time.monotonic() < quick_until else EXIT_POLL_S)
                self._container.reload()
                state = self._container.attrs["State"]
                if state.get("Status") not in ("created", "running", "paused", "stopping"):
                    self._status = int(state.get("ExitCode", -1))
                    return
        except Exception:  # the engine went away: wait() reports what it can
            self._status = -1
        finally:
            self._exited.set()

    def _watchdog(self) -> None:
        while not self._stop.wait(0.5):
            if self._exited.is_set():
                return
            if self.clock.expired():
                self.info.timed_out = True
                self.kill()
                return
            if dir_size(self._spec.workdir.host, self._spec.limits.disk_bytes) > \
                    self._spec.limits.disk_bytes:
                self.info.disk_exceeded = True
                self.kill()
                return

    def alive(self) -> bool:
        return not self._exited.is_set()

    def cpu_seconds(self) -> float | None:
        """The container's cgroup CPU time: its accounting file where this runner sees the
        host's cgroups (found once, from the container's init), else the engine's stats."""
        if self._cpu_file is None:
            self._cpu_file = _container_cpu_file(self._container) or False
        if self._cpu_file:
            with contextlib.suppress(OSError, ValueError):
                return _read_cpu_file(self._cpu_file)
        try:
            stats = self._container.stats(stream=False, one_shot=True)
            return int(stats["cpu_stats"]["cpu_usage"]["total_usage"]) / 1e9
        except Exception:  # an engine without stats: parallelism is not measured
            return None

    def pids(self) -> set[int] | None:
        """The container's processes as this host numbers them: its cgroup's (and any child
        cgroup's) process lists, where this runner sees them (as for its CPU time); None
        otherwise (the GPU witness then says "not measured")."""
        if self._cpu_file is None:
            self._cpu_file = _container_cpu_file(self._container) or False
        if not self._cpu_file:
            return None
        found: set[int] = set()
        for procs in self._cpu_file.parent.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                found |= {int(x) for x in procs.read_text().split()}
        return found

    def freeze(self, frozen: bool) -> bool:
        """The engine's pause (its cgroup freezer); False where it refuses."""
        if frozen == self.clock.paused:
            return True
        import requests
        from docker.errors import APIError

        try:
            self._container.pause() if frozen else self._container.unpause()
        except (APIError, requests.RequestException):
            # An engine without a freezer (timing falls back to one side at a time), or one that
            # did not answer: never leave the container paused behind our back.
            if frozen:
                with contextlib.suppress(APIError, requests.RequestException):
                    self._container.unpause()
            return False
        self.clock.pause() if frozen else self.clock.resume()
        return True

    def kill(self) -> None:
        if self.clock.paused:  # a paused container takes its SIGKILL only once resumed
            self.freeze(False)
        if not self._exited.is_set():
            self._killed = True
            with contextlib.suppress(Exception):
                self._container.kill()

    def wait(self, timeout: float | None = None) -> ExitInfo | None:
        if not self._exited.wait(timeout):
            return None
        with self._lock:
            if self._collected:
                return self.info
            self._collected = True
            self._stop.set()
            self._out.done.wait(5)
            with contextlib.suppress(Exception):
                self._container.reload()
                self.info.oom_killed = bool(self._container.attrs["State"].get("OOMKilled"))
            if self._status == 137 and not self._killed:
                # The engine's OOMKilled can miss: podman 4.3 on cgroup v1 reports false (its conmon
                # sees the OOM kill but drops the marker file in its own working directory). The
                # program is the container's init, which nothing inside its pid namespace can
                # SIGKILL, and we did not: so the kernel's OOM killer did. (Only an exit(137) of its
                # own reads the same; it fails either way.)
                self.info.oom_killed = True
            self.info.returncode = self._status
            self.info.output_exceeded = self._out.exceeded
            self.info.output_excerpt = self._out.excerpt()
            self.info.output_bytes = self._out.total
            self.info.wall_s = time.monotonic() - self.clock.started
            with contextlib.suppress(Exception):
                self._container.remove(force=True)
            return self.info
