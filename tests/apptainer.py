"""The apptainer backend for the tests: the host's apptainer (containers/apptainer-host where the
release has no package for it) and the CPU/MPI runner's image, built once and cached outside the
checkout (containers/apptainer-host/build-image.sh), or a skip that says why not."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from runners.settings import REPO_ROOT, get_settings
from tests import podman

HOST = REPO_ROOT / "containers" / "apptainer-host"


@functools.cache
def _built() -> tuple[str, str] | str:
    """(binary, image), or why there is none here."""
    binary = shutil.which("apptainer") or str(HOST / "apptainer")
    env = {**os.environ, "PARAGRADE_APPTAINER_BIN": binary}
    if os.getuid() != 0:
        return "the apptainer tests build their image and drop to the sandbox user (run as root)"
    # From nothing: the root file system (30 s), the runner image (minutes) and its conversion
    # (2 min); a cached image answers at once. The images' tests may be building the runner
    # image in the background already: their build is waited for, not repeated alongside.
    folder = subprocess.run(["bash", str(HOST / "build-image.sh"), "--path"], env=env,
                            capture_output=True, text=True, check=False).stdout.strip()
    if not (Path(folder).parent / ".complete").is_file():
        podman.wait_for_early_build(600)
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
