"""Points, computed in one place: the runner's report, the server's stored grade (under the
course's own curve, after an instructor's review), and a final run's settled figure all come
from `score`; the stop rule reads the same curve (`curve_share`) to know when points are fixed.

A report's score is its test points plus the performance points its *earned* speedup gets on the
curve: the credited speedup (runners/measure/credit.py), the measured one once an instructor
granted it, none while it is held or refused; nothing unless every test passed. Weak scaling,
where the package measures it, takes `weak_share` of the performance points on its own curve.
"""

from __future__ import annotations

from runners.protocol.manifest import Scoring, performance_share
from runners.protocol.report import GradeReport, credited_speedup
from runners.protocol.verdicts import Verdict


def earned_speedup(report: GradeReport, *, review: str | None = None) -> float | None:
    """The speedup the report's performance points come from (None: none earned)."""
    if report.speedup is None:
        return None
    return credited_speedup(report.credit, report.speedup.median, review=review)


def performance(scoring: Scoring, earned: float | None, *, weak_efficiency: float | None = None,
                speedup_min: float | None = None, speedup_full: float | None = None) -> float:
    """The performance points `earned` (a speedup; None: nothing) gets on the curve; the
    course's own `speedup_min`/`speedup_full` replace the package's where it set them."""
    if earned is None:
        return 0.0
    return scoring.performance_points * performance_share(
        scoring, earned, weak_efficiency, speedup_min=speedup_min, speedup_full=speedup_full)


def score(report: GradeReport, scoring: Scoring, *, earned: float | None,
          speedup_min: float | None = None, speedup_full: float | None = None) -> float:
    """The report's test points and what `earned` gets on the curve, only if it passed
    (rounded to hundredths, as stored)."""
    weak = report.weak_scaling[-1].efficiency if report.weak_scaling else None
    perf = 0.0 if report.verdict is not Verdict.PASSED else performance(
        scoring, earned, weak_efficiency=weak, speedup_min=speedup_min, speedup_full=speedup_full)
    return round(report.test_points + perf, 2)
