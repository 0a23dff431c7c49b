"""A well-formed GradeReport for tests that exercise storage, not grading."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from runners.protocol import (
    Credit,
    Environment,
    GradeReport,
    Interference,
    ScalingPoint,
    SpeedupFigure,
    TestOutcome,
    TestResult,
    Verdict,
)

EARNS_NONE = ("held", "refused", "pending")


def sample_report(*, passed: bool = True, median: float = 1.8, lo: float = 1.6,
                  hi: float = 2.0, credit: str | None = None,
                  interfered: bool | None = None) -> dict[str, Any]:
    """`credit`: what the credit policy made of the speedup (None: a report from before it);
    `interfered`: whether the node was short of cores while it was timed (None: not probed)."""
    env = Environment(hostname="h", cpu_model="cpu", logical_cpus=2, memory_mb=1024,
                      core_set=[0, 1], core_set_enforced=True, backend="bwrap", sandboxed=True,
                      isolation=[], versions={"python": "3.11"}, paragrade_version="0")
    verdict = Verdict.PASSED if passed else Verdict.FAILED
    report = GradeReport(
        assignment="th/t1-multiprocessing", assignment_version="1.1.0", verdict=verdict,
        summary="s", tests=[TestResult(name="hidden/test_hidden.py::test_x",
                                       outcome=TestOutcome.PASSED if passed else TestOutcome.FAILED,
                                       verdict=verdict, message="m", hidden=True, weight=1,
                                       duration_s=0.1)],
        score=(60 if credit in EARNS_NONE else 90) if passed else 0, max_score=100,
        test_points=60 if passed else 0,
        performance_points=(0 if credit in EARNS_NONE else 30) if passed else 0,
        speedup=SpeedupFigure(median=median, ci_low=lo, ci_high=hi, baseline_median_s=0.3,
                              submission_median_s=0.3 / median, repetitions=10,
                              interference=None if interfered is None else Interference(
                                  cores=2, windows=12, short=10 if interfered else 0,
                                  retimed=4 if interfered else 0,
                                  delivered=1.3 if interfered else None, unreliable=interfered),
                              ) if passed else None,
        scaling=[ScalingPoint(workers=2, speedup=median, efficiency=median / 2, ci_low=lo,
                              ci_high=hi, submission_median_s=0.2, karp_flatt=0.1)] if passed else [],
        serial_fraction=0.1, amdahl_serial_fraction=0.1, notes=[],
        credit=None if credit is None else Credit(
            policy="parallel", status=credit,  # type: ignore[arg-type]
            speedup=0.0 if credit in EARNS_NONE else median, measured=True,
            reason=f"your timed calls did 1/100 of the baseline's work ({credit})"),
        output_excerpt="", seed=1,
        environment=env, started_at="2026-11-22T00:00:00+00:00", wall_time_s=1, timed_time_s=0.5)
    return report.model_dump(mode="json")


def store(engine: Engine, submission_id: int, report: dict[str, Any] | None = None) -> None:
    """Record `report` (default: a passed sample) as the submission's grade, as a runner's
    result would."""
    from server.db import session_factory
    from server.models import Submission
    from server.services.grades import grading

    with session_factory(engine)() as s:
        sub = s.get(Submission, submission_id)
        assert sub is not None
        grading.store_report(session=s, sub=sub,
                          report=GradeReport.model_validate(report or sample_report()))
        s.commit()
