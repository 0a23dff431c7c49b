"""A busy node never settles a grade: other work on the cores (tests/neighbour.py: three spinning
processes at the sandboxes' priority, started before the code under test) is read from the
kernel's own run queue, by a fresh probe and by the serial baseline's own wait in its timed
calls, and a grading timed beside it earns its test points and no performance points until a
free node times it."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
import types
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from runners import package
from runners.fleet import runner
from runners.grading import grader, measuring, validate
from runners.measure import calibration, capacity, whole_runs
from runners.measure.capacity import SHORT_SHARE, CapacityProbe, Gauge
from runners.measure.stopping import StopRule
from runners.protocol import GradeReport, Verdict
from runners.protocol.report import BUSY_BASELINE_ALONE, node_was_busy
from runners.runs import configure
from runners.runs.launch import run_script
from runners.runs.stage import Stage
from runners.sandbox import create_executor
from runners.settings import REPO_ROOT, get_settings
from tests.conftest import COURSE
from tests.neighbour import neighbour
from tests.server.reports import sample_report

T1 = COURSE / "t1-multiprocessing"
CPUS = sorted(os.sched_getaffinity(0))[:2]
two_cores = pytest.mark.skipif(len(CPUS) < 2, reason="needs two cores")
PARAGRADE = REPO_ROOT / ".venv" / "bin" / "paragrade"


@two_cores
def test_a_fresh_probe_reads_a_busy_node_from_its_first_probe(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No memory of the cores' best and no calibration: the busy node shows anyway, as waiting
    on a run queue, and the probes that waited are not remembered as the cores' best."""
    monkeypatch.setattr(capacity, "_RATES", {})
    with neighbour(3), CapacityProbe(CPUS) as probe:
        readings, waited = [], []
        for _ in range(9):
            readings.append(probe.measure(2))
            waited.append(probe.waiting)
    assert statistics.median(readings) < SHORT_SHARE * 2, readings
    assert statistics.median(waited) > 0.25, waited
    remembered = capacity._RATES.get(tuple(CPUS), [])
    assert len(remembered) < len(readings) // 2, (len(remembered), waited)


def _calibrate(*args: str) -> tuple[int, str]:
    from runners.cli import app

    r = CliRunner().invoke(app, ["runner", "calibrate", "--seconds", "1", *args])
    return r.exit_code, r.output


@two_cores
def test_a_calibration_is_made_only_on_an_idle_node(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "calibration.json"
    monkeypatch.setenv("PARAGRADE_CALIBRATION_FILE", str(path))
    get_settings.cache_clear()
    try:
        with neighbour(3):
            code, said = _calibrate()
        assert code == 2 and "not calibrated: the node is busy" in said, said
        assert "waited for a CPU" in said or "CPU pressure" in said, said
        assert not path.exists()
        # Idle again: stored, and read back by this host's probes (a few tries: the neighbour's
        # pressure takes seconds to fade from the 10 s average).
        for _ in range(10):
            code, said = _calibrate()
            if code == 0:
                break
            time.sleep(2)
        assert code == 0 and "stored in" in said and path.exists(), said
        cal = calibration.load(path)
        assert cal is not None and set(cal.rates) == set(CPUS) and cal.probes >= 10
        code, said = _calibrate("--cpus", "²")  # bad input: a message, never a traceback
        assert code == 2 and "bad CPU list" in said, said
        code, said = _calibrate("--cpus", "4096")
        assert code == 2 and "not this process's to use" in said, said
        assert calibration.load(path) == cal  # a refused calibration keeps the stored one
        # A runner's start keeps a calibration of every core made in the last hour, and makes
        # a new one where the stored one is older (or dated in the future).
        runner.calibrate(get_settings())
        assert calibration.load(path) == cal
        for made in ("2000-01-01T00:00:00+00:00", "2999-01-01T00:00:00+00:00"):
            path.write_text(cal.model_copy(update={"made_at": made}).model_dump_json())
            runner.calibrate(get_settings())
            again = calibration.load(path)
            assert again is not None and again.made_at != made and again.age_s() is not None
        path.write_text("{not json")
        assert calibration.load(path) is None  # a damaged file is no calibration, not a crash
    finally:
        get_settings.cache_clear()


def _cli_grade(files: list[Path]) -> GradeReport:
    """`paragrade grade --json` in a fresh process, as a student or instructor runs it."""
    out = subprocess.run([str(PARAGRADE), "grade", "treasure-hunt/t1-multiprocessing",
                          *map(str, files), "--json"], capture_output=True, text=True,
                         timeout=600, cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return GradeReport.model_validate(json.loads(out.stdout))


@two_cores
def test_t1_reference_graded_beside_a_neighbour_is_pending_never_a_busy_figure() -> None:
    """The neighbour starts before the grading process and runs through it: the report says
    the node was busy and counts only the tests, or, where the node read free after all, its
    figure is the quiet one (within 10 %), never 0.99× with "0 short". The probes alone missed
    it in some gradings (a woken probe is let run alone: 0.848× beside four spinners with the
    probes' waiting at 0.0); the baseline's own wait in its calls (0.13 there) did not."""
    with neighbour(3):
        busy = _cli_grade([T1 / "reference" / "solution.py"])
    assert busy.verdict is Verdict.PASSED and busy.speedup is not None, busy.summary
    seen = busy.speedup.interference
    assert seen is not None and seen.short > 0, seen
    assert max(seen.waiting or 0, seen.baseline_waiting or 0) > 0.05, seen
    if busy.credit is not None and busy.credit.status == "pending":
        assert busy.score == busy.test_points and busy.performance_points == 0, busy
        assert "performance points pending: the node was busy" in busy.summary
        assert "the node was busy while you were timed" in busy.credit.reason
    else:
        quiet = _cli_grade([T1 / "reference" / "solution.py"])
        assert quiet.speedup is not None
        assert abs(busy.speedup.median / quiet.speedup.median - 1) <= 0.10, (
            busy.speedup, quiet.speedup)


@pytest.mark.slow
@two_cores
def test_a_serial_loop_beside_a_neighbour_earns_no_performance_points() -> None:
    """The serial baseline handed in as a solution, on a starved node: its busy cores and the
    baseline's are both low, and their ratio is no parallel gain."""
    a = package.load(T1)
    with neighbour(3):
        r = grader.grade(a, package.code_of(a, "baseline"))
    assert r.verdict is Verdict.PASSED and r.credit is not None, r.summary
    assert r.credit.status in ("pending", "refused"), r.credit
    assert r.score == r.test_points and r.performance_points == 0, (r.score, r.credit)


@two_cores
def test_a_check_waits_for_a_free_node() -> None:
    """What a package's validation asks before it fails a check its tests' time decides: busy
    beside the neighbour, and free again once it has gone (within the wait)."""
    with neighbour(3):
        assert capacity.busy_now(CPUS)
        assert not capacity.await_free(CPUS, within_s=2, every_s=0.5)
    assert capacity.await_free(CPUS, within_s=60, every_s=1)


@two_cores
def test_a_reference_timed_on_a_busy_node_is_timed_again_never_failed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A package's check never fails on a busy node's figure: a reference whose credit is
    pending is timed again once the node frees, and a node busy throughout keeps the check for
    later (NodeBusy: the server tries it again), never fails it."""
    busy = GradeReport.model_validate(sample_report(credit="pending", interfered=True))
    quiet = GradeReport.model_validate(sample_report(credit="credited"))
    said: list[str] = []
    assert validate._timed_on_a_free_node(quiet, lambda: pytest.fail("timed again"), CPUS,
                                          said.append) is quiet
    assert not said
    assert validate._timed_on_a_free_node(busy, lambda: quiet, CPUS, said.append) is quiet
    assert "waiting for it to free" in said[-1]
    with pytest.raises(calibration.NodeBusy, match="tried again later, not failed"):
        validate._timed_on_a_free_node(busy, lambda: busy, CPUS, said.append)  # busy again
    monkeypatch.setattr(validate, "BUSY_WAIT_S", 2.0)
    with neighbour(3), pytest.raises(calibration.NodeBusy, match="node stayed busy"):
        validate._timed_on_a_free_node(busy, lambda: pytest.fail("timed on a busy node"), CPUS,
                                       said.append)


SCRIPT_MPI = Path(__file__).parent / "fixtures" / "script-mpi"


@two_cores
def test_a_whole_programs_baseline_reads_the_neighbour_in_its_own_wait(stage: Stage) -> None:
    """A script entry's serial baseline is a fresh program each run, gone when its wait could be
    read after it: it is read while it runs. Alone it reads a quiet node's share (0.2–0.6 % here,
    under BUSY_BASELINE_ALONE); beside the neighbour more (1.7–9 % here: the scheduler favours a
    freshly woken program, so a baseline's own wait is the weaker witness beside a steady
    neighbour), and with the probes it says the node was busy."""
    a = package.load(SCRIPT_MPI)
    settings = get_settings()
    executor = create_executor(settings, "bwrap")
    cfg = {role: configure.make_config(
        a, executor=executor, stage=stage, code_dir=stage.add_code(role, package.code_of(a, role)),
        cpus=CPUS, workers=1 if role == "baseline" else 2, gpu_mode="none",
        serial=role == "baseline", settings=settings) for role in ("baseline", "reference")}
    argv = ["1500000", "7"]  # about a quarter of a second serially here
    pinned = replace(cfg["baseline"], limits=replace(cfg["baseline"].limits, cpus=(CPUS[0],)))
    quiet = [run_script(pinned, argv, read_run_delay=True) for _ in range(3)]
    assert all(r.returncode == 0 and r.waited_s is not None for r in quiet), quiet
    alone = min(r.waited_s / r.elapsed_s for r in quiet if r.waited_s is not None)
    assert alone < BUSY_BASELINE_ALONE, quiet
    answers = measuring.load_hook(a).answers
    hook = types.ModuleType("smaller_runs")  # the package's check, on the runs above
    hook.make_args = lambda rng, workers: [int(argv[0]), int(rng.integers(1000))]  # type: ignore[attr-defined]
    hook.check = lambda args, result: answers.problem(result, int(args[0]), int(args[1]))  # type: ignore[attr-defined]
    with neighbour(3), CapacityProbe(CPUS) as probe:
        gauge = Gauge(probe, len(CPUS), budget_s=1.0)
        samples = whole_runs.measure_script(
            hook=hook, workers=2, baseline_cfg=cfg["baseline"], submission_cfg=cfg["reference"],
            rng=np.random.default_rng(5),
            stop=StopRule(budget_s=0, min_reps=2, max_reps=2, target_width=1), gauge=gauge)
    seen = gauge.windows.figure()
    assert len(samples.baseline) >= 1 and seen.baseline_waiting is not None, seen
    assert seen.baseline_waiting > alone and node_was_busy(seen), (seen, alone)
