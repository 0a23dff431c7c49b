"""The public tests of every shipped package run on a student's machine with plain pytest, as the
starter zip gives them (server/services/packages/student_kit.py): the sandbox runtime's Python stands in
for a student's (numpy, mpi4py, numba, dask, torch CPU … and pytest, but no paragrade)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from runners import package
from runners.settings import get_settings
from server.services.packages import student_kit
from server.settings import REPO_ROOT

PACKAGES = sorted(p.parent for p in (REPO_ROOT / "assignments").glob("*/*/assignment.toml"))
NEEDS_A_GPU = {"t4-cuda-mpi"}  # CuPy and a GPU: no CPU stand-in on a student's laptop


@pytest.mark.parametrize("folder", [pytest.param(p, id=p.name) for p in PACKAGES])
def test_the_public_tests_pass_with_plain_pytest_on_the_reference(folder: Path,
                                                                  tmp_path: Path) -> None:
    if folder.name in NEEDS_A_GPU:
        pytest.skip("its public tests need a GPU and CuPy")
    a = package.load(folder)
    m = a.manifest
    kit = tmp_path / "kit"
    shutil.copytree(folder / m.files.public_tests, kit / m.files.public_tests)
    (kit / m.files.public_tests / "conftest.py").write_text(student_kit.conftest(m))
    (kit / "README.txt").write_text(student_kit.readme(m))
    for name, content in package.code_of(a, "reference").items():  # the student's finished code
        (kit / name).write_bytes(content)
    python = get_settings().runtime_dir / "bin" / "python"
    # A student's machine: no paragrade on the path, no project settings; a CPU without CUDA
    # runs numba's kernels in its simulator, as the statement of t3 says.
    env = {"PATH": f"{python.parent}:/usr/bin:/bin", "HOME": str(tmp_path),
           "NUMBA_ENABLE_CUDASIM": "1", "OMP_NUM_THREADS": "2"}
    done = subprocess.run([str(python), "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           m.files.public_tests], cwd=kit, env=env, capture_output=True,
                          text=True, timeout=600)
    out = done.stdout + done.stderr
    if m.launcher.kind == "sbatch" or m.service is not None:  # what only the grader runs
        assert done.returncode == 0 and "skipped" in out and (
            "sbatch" in out or "service" in out), out[-3000:]
        return
    assert done.returncode == 0 and "passed" in out and "failed" not in out, out[-3000:]
    # The starter alone fails them (the tests test something), found in starter/.
    for name in os.listdir(kit):
        if name.endswith(".py"):
            (kit / name).unlink()
    shutil.copytree(folder / m.files.starter, kit / m.files.starter)
    starter = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                              m.files.public_tests], cwd=kit, env=env, capture_output=True,
                             text=True, timeout=600)
    assert starter.returncode != 0 and "not found" not in starter.stdout, starter.stdout[-3000:]


@pytest.mark.parametrize("folder", [pytest.param(p, id=p.name) for p in PACKAGES])
def test_the_statement_says_the_command_the_starter_zip_runs(folder: Path) -> None:
    """Where the package's tests can run on a student's machine, its statement gives the kit's
    own command, not one that exists only inside the project's environment."""
    m = package.load(folder).manifest
    said = (folder / m.statement).read_text()
    command = f"python -m pytest -q {m.files.public_tests}"
    assert command in student_kit.readme(m)
    if m.launcher.kind != "sbatch" and m.array is None:
        assert command in said, f"{m.slug}'s statement does not say `{command}`"
    assert "paragrade test" not in said, m.slug
