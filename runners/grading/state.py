"""One grading's state, filled in stage by stage (runners/grading/grader.py walks the stages),
and the clock of its phases."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from runners.measure import stats
from runners.package import Assignment
from runners.protocol import (
    Credit,
    Environment,
    GradeReport,
    Manifest,
    TestOutcome,
    TestResult,
    Verdict,
    points,
)
from runners.runs import batchscript
from runners.sandbox import Executor
from runners.settings import RunnerSettings

Progress = Callable[[str], None]


class Laps:
    """Wall seconds of a grading's phases, for the report's environment (where the time went)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._phase, self._since = "set-up", time.monotonic()

    def start(self, phase: str) -> None:
        """The current phase ends; `phase` begins."""
        now = time.monotonic()
        self.seconds[self._phase] = self.seconds.get(self._phase, 0.0) + now - self._since
        self._phase, self._since = phase, now

    def table(self, timed_s: float) -> dict[str, float]:
        self.start(self._phase)
        out = {k: round(v, 3) for k, v in self.seconds.items()}
        if "timing" in out:
            out["timed calls"] = round(timed_s, 3)  # the part of "timing" the clock measured
        return out


@dataclass
class Grading:
    """One grading's state, filled in stage by stage: where it runs, what the tests said, the
    time its timed calls took and the notes its report will carry."""

    assignment: Assignment
    settings: RunnerSettings
    executor: Executor
    cpus: list[int]
    gpu_mode: str
    seed: int
    env: Environment
    progress: Progress
    notes: list[str] = field(default_factory=list)
    laps: Laps = field(default_factory=Laps)
    started: float = field(default_factory=time.monotonic)
    started_at: str = field(
        default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    timed_total: float = 0.0
    tests: list[TestResult] = field(default_factory=list)
    output: str = ""
    summary: str = ""
    job: batchscript.BatchJob | None = None
    """The batch script's job, for a package whose students hand in one (sbatch)."""

    @property
    def m(self) -> Manifest:
        return self.assignment.manifest

    def report(self, verdict: Verdict, summary: str, tests: list[TestResult] | None = None, *,
               output: str | None = None, speedup: Any = None, scaling: Any = (),
               weak: Any = (), credit: Credit | None = None) -> GradeReport:
        """The report, its points from runners/protocol/points.py as the server computes them
        (the credited speedup on the curve; `tests`, `output`: the tests run so far unless
        given)."""
        m = self.m
        tests = self.tests if tests is None else tests
        weights = sum(t.weight for t in tests)
        passed = sum(t.weight for t in tests if t.outcome == TestOutcome.PASSED)
        test_points = m.scoring.test_points * (passed / weights if weights else 0.0)
        if verdict.fault != "student":
            test_points = 0.0
        kf = scaling[-1].karp_flatt if scaling else None
        amdahl = stats.amdahl_fit([(p.workers, p.speedup) for p in scaling]) if scaling else None
        graded = GradeReport(
            assignment=self.assignment.ref, assignment_version=m.version, verdict=verdict,
            summary=summary, tests=tests, score=0.0,
            max_score=m.scoring.test_points + m.scoring.performance_points,
            test_points=round(test_points, 2), performance_points=0.0,
            speedup=speedup, scaling=list(scaling), weak_scaling=list(weak), serial_fraction=kf,
            amdahl_serial_fraction=amdahl, credit=credit, notes=self.notes,
            output_excerpt=(self.output if output is None else output)[-16000:],
            seed=self.seed,
            environment=self.env.model_copy(update={"phases": self.laps.table(self.timed_total)}),
            started_at=self.started_at, wall_time_s=round(time.monotonic() - self.started, 3),
            timed_time_s=round(self.timed_total, 3))
        total = points.score(graded, m.scoring, earned=points.earned_speedup(graded))
        return graded.model_copy(update={"score": total, "performance_points": round(
            total - graded.test_points, 2)})
