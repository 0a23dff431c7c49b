"""The apptainer backend for the tests: the host's apptainer (containers/apptainer-host where the
release has no package for it) and the CPU/MPI runner's image, built once and cached outside the
checkout (containers/apptainer-host/build-image.sh), or a skip that says why not."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from runners.settings import REPO_ROOT, get_settings
from tests import podman

HOST = REPO_ROOT / "containers" / "apptainer-host"
_early_lock = threading.Lock()
_early_thread: threading.Thread | None = None
_early_build: subprocess.Popen[bytes] | None = None
_stopping = threading.Event()


def _binary() -> str:
    return shutil.which("apptainer") or str(HOST / "apptainer")


def build_early() -> None:
    """Build the image in the background from the session's start: once the deployment images'
    early build is done (tests/podman.py: the runner image is this image's source), at the
    lowest CPU and I/O priority, as that one. The apptainer tests run last (tests/conftest.py):
    from nothing, a fresh CI machine, they find the image built instead of waiting minutes for
    it with the cores idle. Its outcome is not judged: `_built` runs the script again, which
    reuses whatever this build finished and reports what it could not."""
    global _early_thread
    if _early_thread is not None or os.getuid() != 0 or podman.skip_reason():
        return
    podman.build_images_early()

    def after_the_images() -> None:
        global _early_build
        podman.wait_for_early_build(1500)
        with _early_lock:
            if _stopping.is_set():
                return
            _early_build = podman.start_idle(
                ["bash", str(HOST / "build-image.sh")],
                env={**os.environ, "PARAGRADE_APPTAINER_BIN": _binary(),
                     "PARAGRADE_BUILD_IDLE": "1"})

    _early_thread = threading.Thread(target=after_the_images, daemon=True)
    _early_thread.start()


def _wait_for_early_build(timeout: float) -> None:
    if _early_thread is not None:
        _early_thread.join(timeout)
    if _early_build is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            _early_build.wait(timeout)


def stop_early_build() -> None:
    """End a background build the session no longer waits for (what it made stays cached)."""
    with _early_lock:
        _stopping.set()
        build = _early_build
    if build is not None and build.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(build.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            build.wait(30)


@functools.cache
def _built() -> tuple[str, str] | str:
    """(binary, image), or why there is none here."""
    binary = _binary()
    env = {**os.environ, "PARAGRADE_APPTAINER_BIN": binary}
    if os.getuid() != 0:
        return "the apptainer tests build their image and drop to the sandbox user (run as root)"
    # From nothing: the root file system (30 s), the runner image (minutes) and its conversion
    # (2 min); a cached image answers at once. The session's background build may be at it
    # already: it is waited for, not repeated alongside.
    folder = subprocess.run(["bash", str(HOST / "build-image.sh"), "--path"], env=env,
                            capture_output=True, text=True, check=False).stdout.strip()
    if not (Path(folder).parent / ".complete").is_file():
        _wait_for_early_build(1500)
    build = subprocess.run(["bash", str(HOST / "build-image.sh")], env=env, capture_output=True,
                           text=True, timeout=1200, check=False)
    if build.returncode == 2:  # a prerequisite is missing, not a failure of the build
        return f"cannot build the apptainer image: {build.stderr.strip()[-500:]}"
    assert build.returncode == 0, f"build-image.sh failed:\n{build.stderr[-3000:]}"
    return binary, build.stdout.strip().splitlines()[-1]


def image() -> tuple[str, str]:
    """(binary, image) of the backend; skips the test where this machine cannot build them."""
    got = _built()
    if isinstance(got, str):
        pytest.skip(got)
    return got


@pytest.fixture
def apptainer_backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Settings that grade under apptainer (the default backend while the test runs)."""
    binary, img = image()
    monkeypatch.setenv("PARAGRADE_APPTAINER_BIN", binary)
    monkeypatch.setenv("PARAGRADE_APPTAINER_IMAGE", img)
    monkeypatch.setenv("PARAGRADE_BACKEND", "apptainer")
    get_settings.cache_clear()
    yield "apptainer"
    monkeypatch.undo()
    get_settings.cache_clear()
