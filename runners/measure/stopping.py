"""When one worker count's timing has taken enough samples (StopRule), and the rules a package's
manifest gives each measurement of a grading."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from runners.measure import anchor
from runners.measure.stats import Samples
from runners.protocol import Manifest, curve_share

POINTS_TOLERANCE = 1.0
"""A headline figure stops once its 95 % CI fixes its performance points to within this many."""
ANCHORED_BUDGET = 1.5
"""An anchored figure's turns time three sides (baseline, reference, submission), not two: its
budget is this much larger, so that it gets as many turns."""


@dataclass(frozen=True)
class StopRule:
    """When one worker count's timing has enough samples: at `max_reps`; from `min_reps` on, once
    the 95 % CI of the ratio is narrow enough; else when `budget_s` is spent (≥ 3 runs each).

    "Narrow enough" is `points_curve`-driven (points, ratio earning none, ratio earning all)
    for a figure that earns points: both ends of the CI must earn the same points to within
    POINTS_TOLERANCE, so a clearly fast or clearly slow submission stops at `min_reps` and only
    a borderline one spends the budget. Figures that earn nothing (the scaling table's smaller
    counts) stop at the relative width `target_width`. Either way the reported CI is the one
    computed from every sample taken.

    `anchor_to`: the reference's speedup where the figure is anchored to it (runners/measure/
    anchor.py): the interval that must be narrow is then the anchored one, S_ref times that of
    the reference's times over the submission's turn by turn, the figure points come from (the
    plain ratio's interval decides nothing there)."""

    budget_s: float
    min_reps: int
    max_reps: int
    target_width: float
    points_curve: tuple[float, float, float] | None = None
    anchor_to: float | None = None

    def enough(self, samples: Samples, started: float) -> bool:
        n = min(len(samples.baseline), len(samples.submission))
        if n >= self.max_reps:
            return True
        if n >= self.min_reps and self.narrow(samples):
            return True
        return time.monotonic() - started > self.budget_s and n >= 3

    def narrow(self, samples: Samples) -> bool:
        if self.anchor_to is not None and (a := anchor.measure(samples, self.anchor_to)):
            s = a.reference_speedup
            point, lo, hi = s * a.versus_reference, s * a.versus_ci_low, s * a.versus_ci_high
        else:
            point, lo, hi = samples.speedup()
        if self.points_curve is not None:
            weight, none, full = self.points_curve
            return weight * (curve_share(hi, none, full) - curve_share(lo, none, full)) \
                <= POINTS_TOLERANCE
        return (hi - lo) / point <= self.target_width



def stop_rules(m: Manifest, budget_s: float, *, top: int, weak_top: int,
               anchor_to: float | None = None) -> Callable[[int], StopRule]:
    """The stop rule of each measurement (k workers; -k: weak scaling at k workers): the
    figures points come from (the top worker count, strong and weak) stop once their points
    are fixed; the top count's anchored to `anchor_to` where it is given, with ANCHORED_BUDGET
    times the budget (each of its turns times a third side, the reference)."""
    sc = m.scoring
    weak_share = sc.weak_share if m.timing.weak_scaling else 0.0

    def rule(k: int) -> StopRule:
        curve = None
        if k == top:
            curve = (sc.performance_points * (1 - weak_share), sc.speedup_min, sc.speedup_full)
        elif k == -weak_top:
            curve = (sc.performance_points * weak_share, sc.weak_efficiency_min,
                     sc.weak_efficiency_full)
        anchored = anchor_to if k == top else None
        return StopRule(budget_s=budget_s * (ANCHORED_BUDGET if anchored else 1.0),
                        min_reps=m.timing.min_repetitions, max_reps=m.timing.max_repetitions,
                        target_width=m.timing.target_ci_width, points_curve=curve,
                        anchor_to=anchored)

    return rule
