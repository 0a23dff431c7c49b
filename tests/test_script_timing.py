"""Script entries timed as whole programs: start-up shown, parallel work credited, cheats caught.

The package (tests/fixtures/script-mpi) sums (i*i + seed) % 1000003 over a range: the baseline
in one python process, submissions under `mpirun -n 2`.
"""

from __future__ import annotations

import types
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from runners import package
from runners.grading import grader, measuring
from runners.measure import whole_runs
from runners.measure.stats import Samples
from runners.measure.stopping import StopRule
from runners.measure.timed_calls import WrongTimedAnswer
from runners.protocol import GradeReport, Verdict
from runners.runs import configure
from runners.runs.launch import ScriptResult
from runners.runs.runconfig import RunConfig
from runners.runs.stage import Stage
from runners.sandbox import Mount, create_executor
from runners.settings import get_settings

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


# Runs the code beside it (real.py), then the first time each argument list is run does {first}:
# rank 0 leaves a mark in /marks, a directory the test mounts into every run (the only state a
# run here keeps; a stand-in for a correct program's rare failure as it exits, or for a program
# that answers wrongly now and then).
FIRST_RUN = """
import os, runpy, sys
from pathlib import Path
runpy.run_path(os.path.join(os.path.dirname(__file__), "real.py"), run_name="__main__")
mark = Path("/marks") / "-".join(sys.argv[1:])
if os.environ.get("PMI_RANK", "0") == "0" and not mark.exists():
    mark.touch()
    {first}
"""
EXITS = "sys.exit(3)"
ANSWERS_WRONGLY = 'Path("out/answer.txt").write_text("1")'


def _time_first_runs_failing(stage: Stage, baseline_first: str, submission_first: str
                             ) -> tuple[Samples, list[list[ScriptResult]]]:
    """Two blocks of script-mpi's whole runs, each side's code doing its `…_first` on its first
    run of each argument list; the samples and, per argument list, every run the check saw."""
    a = package.load(PACKAGE)
    answers = measuring.load_hook(a).answers
    runs: dict[str, list[ScriptResult]] = defaultdict(list)

    def check(argv: list[str], result: ScriptResult) -> str | None:
        runs[" ".join(argv)].append(result)
        return answers.problem(result, int(argv[0]), int(argv[1]))  # type: ignore[no-any-return]

    hook = types.ModuleType("recording_hook")
    hook.make_args = lambda rng, workers: [400_000, int(rng.integers(1000))]  # type: ignore[attr-defined]
    hook.check = check  # type: ignore[attr-defined]
    settings = get_settings()

    def cfg(role: str, serial: bool, first: str) -> RunConfig:
        marks = stage.root / f"marks-{role}"  # where the sandbox's user reaches
        marks.mkdir()
        marks.chmod(0o777)
        code = stage.add_code(role, {"solution.py": FIRST_RUN.format(first=first).encode(),
                                     "real.py": package.code_of(a, role)["solution.py"]})
        made = configure.make_config(
            a, executor=create_executor(settings, "bwrap"), stage=stage, code_dir=code,
            cpus=[0, 1], workers=1 if serial else 2, gpu_mode="none", serial=serial, settings=settings)
        return replace(made, extra_mounts=(*made.extra_mounts, Mount(marks, "/marks", writable=True)))

    samples = whole_runs.measure_script(
        hook=hook, workers=2, baseline_cfg=cfg("baseline", True, baseline_first),
        submission_cfg=cfg("reference", False, submission_first),
        rng=np.random.default_rng(3), stop=StopRule(budget_s=0, min_reps=2, max_reps=2, target_width=1))
    return samples, list(runs.values())[1:]  # the warm-up's arguments first


def test_a_submission_cannot_throw_its_slow_runs_away(stage: Stage) -> None:
    """A timed run that exits with an error is run once more (t5's gloo now and then aborts a
    rank of a correct script as it exits), the failed run's time counting with its rerun's on the
    submission's side (a program that fails whenever it runs late gains nothing); the baseline's
    rerun counts alone."""
    samples, timed = _time_first_runs_failing(stage, EXITS, EXITS)
    assert len(timed) == 2 and all(len(r) == 4 for r in timed), timed
    assert [r.returncode for r in timed[0]] == [3, 0, 3, 0], timed[0]
    for block, (r1, r2, r3, r4) in enumerate(timed):
        # Block 0 runs the baseline first, block 1 the submission first.
        base, sub = (r2, (r3, r4)) if block == 0 else (r4, (r1, r2))
        assert samples.baseline[block] == base.elapsed_s
        assert samples.submission[block] == pytest.approx(sub[0].elapsed_s + sub[1].elapsed_s)
        assert samples.baseline_cpu[block] == base.cpu_s
        assert sub[0].cpu_s is not None and sub[1].cpu_s is not None
        assert samples.submission_cpu[block] == pytest.approx(sub[0].cpu_s + sub[1].cpu_s)


def test_a_wrong_answer_from_a_clean_exit_is_not_run_again(stage: Stage) -> None:
    """Only a failed exit earns a second run: a program wrong now and then is wrong (else it
    would need to be wrong twice running to lose its timing)."""
    with pytest.raises(WrongTimedAnswer, match="not the sum"):
        _time_first_runs_failing(stage, "pass", ANSWERS_WRONGLY)


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
