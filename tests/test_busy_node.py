"""A busy node never settles a grade: other work on the cores (tests/neighbour.py: three spinning
processes at the sandboxes' priority, started before the code under test) is read from the
kernel's own run queue by a fresh probe, and a serial loop timed beside it earns
its test points and no performance points until a free node times it."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runners import package
from runners.grading import grader
from runners.measure import calibration, capacity
from runners.measure.capacity import SHORT_SHARE, CapacityProbe
from runners.protocol import Verdict
from runners.settings import get_settings
from tests.conftest import COURSE
from tests.neighbour import neighbour

T1 = COURSE / "t1-multiprocessing"
CPUS = sorted(os.sched_getaffinity(0))[:2]
two_cores = pytest.mark.skipif(len(CPUS) < 2, reason="needs two cores")


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
        path.write_text("{not json")
        assert calibration.load(path) is None  # a damaged file is no calibration, not a crash
    finally:
        get_settings.cache_clear()


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
