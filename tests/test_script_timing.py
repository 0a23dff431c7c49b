"""Script entries timed as whole programs: start-up shown, parallel work credited, cheats caught.

The package (tests/fixtures/script-mpi) sums (i*i + seed) % 1000003 over a range: the baseline
in one python process, submissions under `mpirun -n 2`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from runners import grader, package
from runners.protocol import GradeReport, Verdict

pytestmark = pytest.mark.slow
PACKAGE = Path(__file__).parent / "fixtures" / "script-mpi"

# Right answers by far less work: (i*i + seed) % p repeats with period p, so rank 0 sums one
# period (vectorised) and multiplies; the other rank is idle.
SHORTCUT = '''
import sys
from pathlib import Path
import numpy as np
from mpi4py import MPI

P = 1000003
n, seed = int(sys.argv[1]), int(sys.argv[2])
if MPI.COMM_WORLD.rank == 0:
    def head(k):
        i = np.arange(k, dtype=np.int64)
        return int(((i * i + seed) % P).sum())
    Path("out").mkdir(exist_ok=True)
    Path("out/answer.txt").write_text(str((n // P) * head(P) + head(n % P)))
'''

# Right on the tests' small ranges, wrong on the timed one.
WRONG_WHEN_BIG = '''
import sys
from pathlib import Path
from mpi4py import MPI

comm = MPI.COMM_WORLD
n, seed = int(sys.argv[1]), int(sys.argv[2])
step = 1 if n < 100000 else 2
part = sum((i * i + seed) % 1000003 for i in range(comm.rank * step, n, comm.size * step))
total = comm.reduce(part, root=0)
if comm.rank == 0:
    Path("out").mkdir(exist_ok=True)
    Path("out/answer.txt").write_text(str(total))
'''


def grade(source: str) -> GradeReport:
    return grader.grade(package.load(PACKAGE), {"solution.py": source.encode()})


def test_the_reference_is_timed_whole_with_its_start_up_shown() -> None:
    report = grade((PACKAGE / "reference" / "solution.py").read_text())
    assert report.verdict == Verdict.PASSED, report.summary
    fig = report.speedup
    assert fig is not None and fig.repetitions >= 3
    assert fig.ci_low <= fig.median <= fig.ci_high
    # Each side's start-up is measured and is part of its run, not all of it. mpirun with two
    # interpreters starts about as fast as one python on 2 idle cores (0.1164 s against 0.1166 s
    # once), so only a pathological gap between the two fails.
    assert fig.startup_baseline_s is not None and fig.startup_submission_s is not None
    assert 0 < fig.startup_baseline_s < fig.baseline_median_s
    assert 0 < fig.startup_submission_s < fig.submission_median_s
    assert fig.startup_submission_s > 0.5 * fig.startup_baseline_s
    assert any("start-up" in n and "of your" in n for n in report.notes), report.notes
    assert [p.workers for p in report.scaling] == [2]
    cpu = report.scaling[0].cpu
    assert cpu is not None and cpu.parallelism > 1.3, cpu  # both ranks' CPU, read from outside
    assert report.credit is not None and report.credit.status in ("credited", "capped")
    # Two ranks on two cores; lenient. In a noisy hour this VM can take the second core through
    # most of the timing: the figure is then marked as measured under interference.
    assert fig.median > 1.1 or (fig.interference and fig.interference.unreliable), report.summary
    assert report.performance_points > 0


REFUSING_TWICE = """

_calls = []
_check_answer = check


def check(argv, result):
    \"\"\"The package's check, refusing its 1st and 4th runs (the warm-up's baseline run and the
    first timed one): a stand-in for a correct program's rare failure as it exits.\"\"\"
    _calls.append(argv)
    if len(_calls) in (1, 4):
        return "refused once"
    return _check_answer(argv, result)
"""


def test_a_timed_run_the_check_rejects_is_run_once_more(tmp_path: Path) -> None:
    """A rejected run is run again with the same arguments and only the second counts (t5's
    gloo now and then aborts a rank of a correct script at exit); wrong twice still fails
    (test_a_wrong_timed_run_fails_the_grading)."""
    root = tmp_path / "script-mpi"
    shutil.copytree(PACKAGE, root)
    hook = root / "hidden" / "timing.py"
    hook.write_text(hook.read_text() + REFUSING_TWICE)
    report = grader.grade(package.load(root),
                          {"solution.py": (PACKAGE / "reference" / "solution.py").read_bytes()})
    assert report.verdict == Verdict.PASSED, report.summary
    assert report.speedup is not None and report.speedup.repetitions >= 3, report.summary


def test_a_serial_shortcut_keeps_its_test_points_and_earns_no_performance_points() -> None:
    report = grade(SHORTCUT)
    assert report.verdict == Verdict.PASSED, report.summary
    assert report.test_points == 60
    assert report.speedup is not None and report.speedup.median > 1.6  # faster than the loop
    # Refused, or held for review where the idle rank's own imports read as parallel: no points
    # either way, and never ranked until an instructor grants them.
    assert report.credit is not None and report.credit.status in ("refused", "held"), report.credit
    assert "less work" in report.credit.reason or "does not come from parallel" in \
        report.credit.reason, report.credit.reason
    assert report.performance_points == 0


def test_a_wrong_timed_run_fails_the_grading() -> None:
    report = grade(WRONG_WHEN_BIG)
    assert report.verdict == Verdict.FAILED, report.summary
    assert "timed run returned a wrong answer" in report.summary
    assert "not the sum" in report.summary
