"""A private podman API service for the tests that need a Docker API (the docker backend's, the
images'): podman with containers/podman.conf (runc, cgroupfs), on its own socket, stopped at the
end with every container it ran under the label and every `libpod_parent` cgroup it made removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runners.sandbox.docker import SANDBOX_LABEL
from runners.settings import REPO_ROOT

__all__ = ["SANDBOX_LABEL", "build_images_early", "environment", "service",
           "service_cpu_seconds", "skip_reason", "skip_unless_rootful_podman", "start_idle",
           "stop_early_build", "wait_for_early_build"]

CONF = REPO_ROOT / "containers" / "podman.conf"
CGROUP_ROOT = Path("/sys/fs/cgroup")


def _no_rootful_podman() -> str | None:
    """Why rootful podman cannot run here (None: it can)."""
    if shutil.which("podman") is None:
        return "podman is not installed (apt-get install podman runc)"
    if shutil.which("runc") is None:
        return "runc is not installed (apt-get install runc): crun fails on these hosts"
    if os.getuid() != 0:
        return "these tests drive rootful podman (run as root)"
    return None


def skip_reason() -> str | None:
    """Why the tests that drive podman skip here (None: they run)."""
    return _no_rootful_podman()


def skip_unless_rootful_podman() -> None:
    if reason := _no_rootful_podman():
        pytest.skip(reason)


def environment() -> dict[str, str]:
    """This process's environment with podman pointed at our containers.conf."""
    return {**os.environ, "CONTAINERS_CONF": str(CONF)}


BUILD_IMAGES = REPO_ROOT / "scripts" / "build-images.sh"
_early_build: subprocess.Popen[bytes] | None = None


def build_images_early() -> None:
    """Start scripts/build-images.sh now, in the background, at the lowest CPU and I/O priority
    (`start_idle`; PARAGRADE_BUILD_IDLE puts its RUN steps' containers at CPU weight 2).

    From nothing (a fresh CI machine) the deployment images take minutes to build, mostly pip
    unpacking wheels; started when the session starts, the build uses the cores the rest of the
    suite leaves idle (about 60 % of them) instead of holding up the images' tests. Its outcome
    is not judged: the images fixture waits for it, then runs the script again, which reuses
    every layer this build made and rebuilds (and reports) whatever it could not."""
    global _early_build
    if _early_build is not None or _no_rootful_podman():
        return
    _early_build = start_idle(["bash", str(BUILD_IMAGES)],
                              env={**environment(), "PARAGRADE_BUILD_IDLE": "1"})


def start_idle(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start a background build in a session of its own (stopped as a whole), at the lowest CPU
    priority in fact: with the kernel's autogroups (on here) a new session weighs as much as the
    tests' own, whatever its processes' nice, and a niced spinner in one took half the core from
    a timed process (CI, 2026-11-27: t1's reference graded 1.03× beside the builds). Its group's
    own nice, 19, leaves the timed process 0.96 of the core. And idle-class I/O."""
    proc = subprocess.Popen(["nice", "-n", "19", "ionice", "-c", "3", *argv], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    with contextlib.suppress(OSError):  # no autogroups: nice alone is the priority
        Path(f"/proc/{proc.pid}/autogroup").write_text("19")
    return proc


def wait_for_early_build(timeout: float) -> None:
    if _early_build is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            _early_build.wait(timeout)


def stop_early_build() -> None:
    """End a background build the session no longer waits for (its layers stay cached)."""
    if _early_build is not None and _early_build.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(_early_build.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            _early_build.wait(30)


def _libpod_cgroups() -> set[Path]:
    """Every cgroup directory podman's cgroupfs manager made (v1 per controller, or v2)."""
    found: set[Path] = set()
    for top in [CGROUP_ROOT / "libpod_parent", *CGROUP_ROOT.glob("*/libpod_parent")]:
        if top.is_dir():
            found.add(top)
            found.update(p for p in top.rglob("*") if p.is_dir())
    return found


def _wait_for_service(url: str, proc: subprocess.Popen[bytes], log: Path) -> Any:
    import docker

    deadline = time.monotonic() + 30
    sock = Path(url.removeprefix("unix://"))
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"podman system service exited ({proc.returncode}): {log.read_text()[-2000:]}")
        if sock.exists():
            client = docker.DockerClient(base_url=url)
            with contextlib.suppress(Exception):
                if client.ping():
                    return client
            client.close()
        time.sleep(0.05)
    pytest.fail(f"podman's API socket did not answer within 30 s: {log.read_text()[-2000:]}")


@contextlib.contextmanager
def service(tmp: Path) -> Iterator[tuple[str, Any]]:
    """`podman system service` on `tmp/podman.sock`: (its unix:// URL, a docker.DockerClient)."""
    cgroups_before = _libpod_cgroups()
    log = tmp / "service.log"
    url = f"unix://{tmp}/podman.sock"
    with log.open("wb") as log_fh:
        # cwd: conmon drops an `oom` file into its working directory on an OOM kill.
        proc = subprocess.Popen(["podman", "system", "service", "--time=0", url], env=environment(),
                                cwd=tmp, stdin=subprocess.DEVNULL, stdout=log_fh,
                                stderr=subprocess.STDOUT)
    try:
        client = _wait_for_service(url, proc, log)
        existing = {c.id for c in client.containers.list(all=True, filters={"label": SANDBOX_LABEL})}
        yield url, client
        for c in client.containers.list(all=True, filters={"label": SANDBOX_LABEL}):
            if c.id not in existing:
                with contextlib.suppress(Exception):
                    c.remove(force=True)
        client.close()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        # podman makes `libpod_parent` (and per-container children) at the cgroup roots.
        for d in sorted(_libpod_cgroups() - cgroups_before, key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                d.rmdir()


def service_cpu_seconds(url: str) -> float:
    """CPU seconds the podman service listening on `url` has used so far."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if b"system" in argv and url.encode() in argv:
                fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
                return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    raise LookupError(f"no podman service on {url}")
