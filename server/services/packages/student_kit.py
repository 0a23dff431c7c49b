"""What makes an assignment's public tests run on a student's own machine with plain `pytest`.

The grader gives the tests a `submission` fixture that runs each call in a sandbox on a
runner's cores; a student has none of that (nor paragrade). The starter zip therefore carries a
`conftest.py` beside the public tests (`CONFTEST`, standard library and pytest only; numpy only
for the `rng` fixture) whose `submission` calls the student's code in the test's own process,
runs a script entry as a program, and runs a job array's tasks one after another, and a
README.txt that says the command. Passing them is no promise of the grade: the hidden tests and
the speedup are the grader's.
"""

from __future__ import annotations

from runners.protocol import Manifest

README = """Public tests of {title}
{rule}

Write your code in {entry} (the starter's is a start), then run the public tests with plain
pytest from this folder (Python 3.11 or later, pytest and the libraries the statement names):

    python -m pytest -q {tests}

They call your code in pytest's own process{how}. The grader runs them (and its hidden tests)
in a sandbox on the runner's cores and measures your speedup there; passing here is a first
check, no promise of the grade. Your code is looked for in the folder named by the
PARAGRADE_CODE variable if set, else here, else in {starter}/.
"""

CONFTEST = '''"""Run these public tests with plain pytest, without paragrade (written by the platform).

`submission` calls your code in this process ({how}); the grader runs it in a sandbox on the
runner's cores. Your code is looked for in $PARAGRADE_CODE, else the folder pytest runs from,
else the starter folder beside this one.
"""

import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import pytest

PACKAGE = {package}


def _code_dir():
    here = Path(__file__).resolve().parent
    for folder in (os.environ.get("PARAGRADE_CODE"), Path.cwd(), here.parent / PACKAGE["starter"]):
        if folder and (Path(folder) / PACKAGE["entry"]).is_file():
            return Path(folder)
    pytest.fail(f"{{PACKAGE['entry']}} not found: run pytest from the folder that holds it, or "
                "set PARAGRADE_CODE to that folder")


class ScriptResult:
    def __init__(self, returncode, output, files, elapsed_s):
        self.returncode, self.output, self.files, self.elapsed_s = (returncode, output, files,
                                                                    elapsed_s)


class Submission:
    """Your code, as the grader's `submission` fixture offers it."""

    workers = PACKAGE["cores"]

    def __init__(self):
        self._dir, self._module = _code_dir(), None

    def _loaded(self):
        if PACKAGE["service"]:
            pytest.skip("your code reads from the grader's own service, which only the grader "
                        "runs: upload it to run these tests")
        if self._module is None:  # by name, so that a Pool's workers find its functions
            sys.path.insert(0, str(self._dir))
            self._module = importlib.import_module(Path(PACKAGE["entry"]).stem)
        return self._module

    def call(self, function, *args, **kwargs):
        return getattr(self._loaded(), function)(*args, **kwargs)

    def timed(self, function, *args, **kwargs):
        start = time.perf_counter()
        value = self.call(function, *args, **kwargs)
        return value, time.perf_counter() - start

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *a, **k: self.call(name, *a, **k)

    def array(self, n_tasks=None, *, concurrency=None, **inputs):
        """The job array's tasks, one after another (the grader runs them at once)."""
        n = n_tasks or PACKAGE["tasks"]
        return [self.call(PACKAGE["function"], task_id=i, n_tasks=n, **inputs) for i in range(n)]

    def run(self, *args, workers=None):
        """Your program with these arguments; the files it wrote in out/ come back."""
        kind, ranks = PACKAGE["launcher"], workers or self.workers
        entry = str(self._dir / PACKAGE["entry"])
        argv = [sys.executable, entry]
        if kind == "mpirun" and (mpi := shutil.which("mpiexec") or shutil.which("mpirun")):
            argv = [mpi, "-n", str(ranks), sys.executable, entry]
        elif kind == "torchrun":
            argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                    f"--nproc_per_node={{ranks}}", entry]
        elif kind == "sbatch":
            pytest.skip("a batch script runs under SLURM: submit it with sbatch on your cluster")
        with tempfile.TemporaryDirectory() as work:
            (Path(work) / "out").mkdir()
            start = time.perf_counter()
            done = subprocess.run([*argv, *map(str, args)], cwd=work, capture_output=True,
                                  text=True, timeout=PACKAGE["wall_seconds"] * 4)
            files = {{p.name: p.read_bytes() for p in (Path(work) / "out").iterdir()
                     if p.is_file()}}
            return ScriptResult(done.returncode, done.stdout + done.stderr, files,
                                time.perf_counter() - start)


def pytest_configure(config):
    config.addinivalue_line("markers", "weight(w): the test's share of the test points")


@pytest.fixture
def submission():
    return Submission()


@pytest.fixture
def seed(request):
    return zlib.crc32(request.node.nodeid.encode())


@pytest.fixture
def rng(seed):
    import numpy as np
    return np.random.default_rng(seed)
'''


def _how(m: Manifest) -> str:
    if m.entry.style == "script":
        return {"mpirun": ", a program under mpiexec when you have MPI",
                "torchrun": ", a program under torch.distributed.run",
                "sbatch": "; a batch script's tests are skipped: submit it with sbatch"}.get(
            m.launcher.kind, ", a program")
    if m.launcher.kind == "mpirun":
        return " (one MPI rank)"
    return ""


def conftest(m: Manifest) -> str:
    """The public tests' conftest.py for this package."""
    package = {"entry": m.entry.file, "function": m.entry.function, "starter": m.files.starter,
               "cores": m.resources.cores, "launcher": m.launcher.kind,
               "tasks": m.array.tasks if m.array else None, "service": m.service is not None,
               "wall_seconds": m.resources.wall_seconds}
    return CONFTEST.format(package=repr(package),
                           how=_how(m).strip(" ,;()") or "your functions called directly")


def readme(m: Manifest) -> str:
    title = f"{m.title} ({m.slug} {m.version})"
    return README.format(title=title, rule="=" * (len(title) + 16), entry=m.entry.file,
                         tests=m.files.public_tests, starter=m.files.starter, how=_how(m))
