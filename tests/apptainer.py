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
CPU_IMAGE = HOST / "build-image.sh"
GPU_IMAGE = HOST / "build-gpu-image.sh"
_early_lock = threading.Lock()
_early_build: subprocess.Popen[bytes] | None = None
_stopping = threading.Event()
_finished: dict[Path, threading.Event] = {}  # each early build's script → set once it has ended


def _binary() -> str:
    return shutil.which("apptainer") or str(HOST / "apptainer")


def build_early(gpu: bool = False) -> None:
    """Build the images in the background from the session's start, one after the other, at the
    lowest CPU and I/O priority (podman.start_idle): once the deployment images' early build is
    done (tests/podman.py: the runner images are these images' source), the CPU runner's
    apptainer image, then, with `gpu`, the GPU runner's (its OCI image compiles Open MPI: tens of
    minutes from nothing). The apptainer tests run last (tests/conftest.py), the GPU image's
    last of all: from nothing, a fresh CI machine, they find the images built instead of waiting
    minutes for them with the cores idle. Their outcome is not judged here: each test runs its
    script again, which reuses whatever this build finished and reports what it could not."""
    if _finished or os.getuid() != 0 or podman.skip_reason():
        return
    scripts = [CPU_IMAGE, GPU_IMAGE] if gpu else [CPU_IMAGE]
    for script in scripts:
        _finished[script] = threading.Event()
    podman.build_images_early()

    def one_after_the_other() -> None:
        global _early_build
        podman.wait_for_early_build(1500)
        for script in scripts:
            with _early_lock:
                if _stopping.is_set():
                    break
                _early_build = build = podman.start_idle(
                    ["bash", str(script)],
                    env={**os.environ, "PARAGRADE_APPTAINER_BIN": _binary(),
                         "PARAGRADE_BUILD_IDLE": "1"})
            build.wait()
            _finished[script].set()
        for done in _finished.values():
            done.set()

    threading.Thread(target=one_after_the_other, daemon=True).start()


def _wait_for_early_build(script: Path, timeout: float) -> None:
    """Until `script`'s early build has ended (at once where none was started)."""
    if script in _finished:
        _finished[script].wait(timeout)


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


def _run(script: Path, *args: str, timeout: float) -> str:
    """`script`'s standard output once it has built its image (reusing what is built), or raises
    Unbuildable saying why this machine cannot build it (exit 2: a prerequisite is missing, not a
    failure of the build)."""
    built = subprocess.run(["bash", str(script), *args],
                           env={**os.environ, "PARAGRADE_APPTAINER_BIN": _binary()},
                           capture_output=True, text=True, timeout=timeout, check=False)
    if built.returncode == 2:
        raise Unbuildable(f"cannot build the image ({script.name}): {built.stderr.strip()[-500:]}")
    assert built.returncode == 0, f"{script.name} failed:\n{built.stderr[-3000:]}"
    return built.stdout


class Unbuildable(Exception):
    """Why an image cannot be built here (its tests skip, saying so)."""


@functools.cache
def _built() -> tuple[str, str] | str:
    """(binary, image), or why there is none here."""
    if os.getuid() != 0:
        return "the apptainer tests build their image and drop to the sandbox user (run as root)"
    # From nothing: the root file system (30 s), the runner image (minutes) and its conversion
    # (2 min); a cached image answers at once. The session's background build may be at it
    # already: it is waited for, not repeated alongside.
    folder = subprocess.run(["bash", str(CPU_IMAGE), "--path"], capture_output=True, text=True,
                            env={**os.environ, "PARAGRADE_APPTAINER_BIN": _binary()},
                            check=False).stdout.strip()
    if not (Path(folder).parent / ".complete").is_file():
        _wait_for_early_build(CPU_IMAGE, 1500)
    try:
        return _binary(), _run(CPU_IMAGE, timeout=1200).strip().splitlines()[-1]
    except Unbuildable as why:
        return str(why)


@functools.cache
def gpu_image() -> dict[str, str] | str:
    """What build-gpu-image.sh says of the GPU runner's image and its CPU path (its `key: value`
    lines), or why it cannot be built here. Waits for the session's early build (tens of
    minutes from nothing), then runs the script again: the images are reused as made."""
    if os.getuid() != 0:
        return "building the GPU image needs root"
    _wait_for_early_build(GPU_IMAGE, 3600)
    try:
        said = _run(GPU_IMAGE, timeout=3600)
    except Unbuildable as why:
        return str(why)
    return dict(line.split(": ", 1) for line in said.splitlines() if ": " in line)


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
