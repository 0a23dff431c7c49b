"""Speedup statistics: CI coverage, Karp–Flatt, Amdahl fit, the points curve."""

import time

import numpy as np
import pytest

from runners.measure import stats, stopping
from runners.protocol import Manifest, Scoring, curve_share, performance_share


def test_ratio_ci_brackets_the_median_ratio() -> None:
    rng = np.random.default_rng(1)
    base = list(1.0 + 0.05 * rng.standard_normal(30))
    sub = list(0.5 + 0.025 * rng.standard_normal(30))
    point, lo, hi = stats.ratio_ci(base, sub)
    assert lo < point < hi
    assert 1.9 < point < 2.1
    assert hi - lo < 0.3


def test_ratio_ci_covers_the_truth_most_of_the_time() -> None:
    rng = np.random.default_rng(7)
    covered = 0
    for i in range(100):
        base = list(rng.lognormal(0.0, 0.1, 15))
        sub = list(rng.lognormal(np.log(0.5), 0.1, 15))
        _, lo, hi = stats.ratio_ci(base, sub, seed=i)
        covered += lo <= 2.0 <= hi
    assert covered >= 85  # nominal 95 %; percentile bootstrap on n=15 runs a little narrow


def test_wider_noise_gives_a_wider_interval() -> None:
    rng = np.random.default_rng(3)
    z = rng.standard_normal(20)
    _, lo1, hi1 = stats.ratio_ci(list(1 + 0.01 * z), list(0.5 + 0.005 * z[::-1]))
    _, lo2, hi2 = stats.ratio_ci(list(1 + 0.2 * z), list(0.5 + 0.1 * z[::-1]))
    assert hi2 - lo2 > 5 * (hi1 - lo1)


def test_karp_flatt() -> None:
    assert stats.karp_flatt(2.0, 2) == pytest.approx(0.0)
    assert stats.karp_flatt(1.0, 4) == pytest.approx(1.0)
    assert stats.karp_flatt(1.6, 2) == pytest.approx(0.25)
    assert stats.karp_flatt(3.0, 1) is None


def test_amdahl_fit_recovers_the_serial_fraction() -> None:
    f = 0.1
    points = [(p, 1 / (f + (1 - f) / p)) for p in (1, 2, 4, 8, 16)]
    assert stats.amdahl_fit(points) == pytest.approx(f, abs=0.002)
    assert stats.amdahl_fit([(1, 1.0)]) is None


def test_performance_curve_is_continuous_and_clamped() -> None:
    assert curve_share(0.5, 1.0, 2.0) == 0.0
    assert curve_share(1.5, 1.0, 2.0) == pytest.approx(0.5)
    assert curve_share(3.0, 1.0, 2.0) == 1.0
    a, b = curve_share(1.50, 1.0, 2.0), curve_share(1.52, 1.0, 2.0)
    assert abs(a - b) < 0.05  # noise moves points little


def test_weak_scaling_blends_into_the_performance_share() -> None:
    weak = Scoring(speedup_min=1.0, speedup_full=2.0, weak_share=0.5, weak_efficiency_min=0.5,
                   weak_efficiency_full=0.9)
    assert performance_share(weak, 2.0, 0.9) == pytest.approx(1.0)
    assert performance_share(weak, 2.0, 0.5) == pytest.approx(0.5)  # the weak half earns nothing
    assert performance_share(weak, 1.5, 0.7) == pytest.approx(0.5)
    assert performance_share(weak, 2.0, None) == pytest.approx(1.0)  # not measured: strong only
    # the server's own curve replaces the package's for the strong half only
    assert performance_share(weak, 2.0, 0.9, speedup_min=2.0, speedup_full=4.0) == \
        pytest.approx(0.5)
    with pytest.raises(ValueError, match=r"weak_share needs timing\.weak_scaling"):
        Manifest.model_validate({
            "slug": "x", "title": "x", "version": "1",
            "entry": {"style": "function", "file": "s.py", "function": "f"},
            "resources": {"kind": "cpu", "cores": 1}, "scoring": {"weak_share": 0.5}})


def test_timing_inputs_are_for_job_arrays_alone() -> None:
    base = {"slug": "x", "title": "x", "version": "1",
            "entry": {"style": "function", "file": "s.py", "function": "f"},
            "resources": {"kind": "cpu", "cores": 2}, "timing": {"inputs": 1}}
    with pytest.raises(ValueError, match=r"timing\.inputs is for \[array\] packages"):
        Manifest.model_validate(base)
    assert Manifest.model_validate({**base, "array": {"tasks": 4}}).timing.inputs == 1
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        Manifest.model_validate({**base, "array": {"tasks": 4}, "timing": {"inputs": 0}})


def test_weak_efficiency_is_one_worker_time_over_k_worker_time() -> None:
    s = stats.Samples(2, baseline=[0.10, 0.11, 0.09, 0.10], submission=[0.125, 0.12, 0.13, 0.125])
    (point,) = stats.summarize_weak([s])
    assert point.workers == 2 and point.efficiency == pytest.approx(0.8, abs=0.02)
    assert point.ci_low <= point.efficiency <= point.ci_high


def test_an_arrays_makespan_is_its_tasks_list_scheduled_in_id_order() -> None:
    from runners.runs.array import list_schedule

    # Two slots: 4 and 1 start at once; 2 goes where 1 ended (t=1), 3 where 2 ended (t=3).
    assert list_schedule([4.0, 1.0, 2.0, 3.0], 2) == 6.0
    assert list_schedule([4.0, 1.0, 2.0, 3.0], 1) == 10.0  # one slot: the sum
    assert list_schedule([4.0, 1.0], 8) == 4.0  # more slots than tasks: the longest


def _sequential(rule: stopping.StopRule, true: float, sigma: float,
                rng: np.random.Generator) -> stats.Samples:
    """Samples drawn one pair at a time (lognormal noise, true ratio `true`) until `rule` stops."""
    s = stats.Samples(workers=2)
    started = time.monotonic()
    while True:
        s.baseline.append(float(rng.lognormal(0.0, sigma)))
        s.submission.append(float(rng.lognormal(-np.log(true), sigma)))
        if rule.enough(s, started):
            return s


POINTS_RULE = stopping.StopRule(budget_s=1e9, min_reps=5, max_reps=40, target_width=0.10,
                                points_curve=(40.0, 1.0, 2.0))


def test_points_rule_stops_clear_cases_early_and_spends_the_budget_on_borderline_ones() -> None:
    rng = np.random.default_rng(11)
    fast = [len(_sequential(POINTS_RULE, 3.0, 0.1, rng).submission) for _ in range(10)]
    slow = [len(_sequential(POINTS_RULE, 0.6, 0.1, rng).submission) for _ in range(10)]
    border = [len(_sequential(POINTS_RULE, 1.5, 0.1, rng).submission) for _ in range(5)]
    assert max(fast) <= 6 and max(slow) <= 6, (fast, slow)  # every end earns 40 (or 0) points
    assert min(border) == 40, border  # 1 point is a speedup of 0.025: never that sure here
    # The width rule (figures that earn no points) ignores the curve: same noise, wider CI.
    width = stopping.StopRule(budget_s=1e9, min_reps=5, max_reps=40, target_width=0.10)
    assert len(_sequential(width, 3.0, 0.1, rng).submission) > max(fast)


def test_early_stop_reports_the_ci_of_every_sample_and_it_still_covers() -> None:
    """Stopping on the points never reports a narrower CI than the samples support: the figure's
    CI is the bootstrap over every sample taken, and over many gradings it holds the truth about
    as often as a fixed-size measurement does."""
    rng = np.random.default_rng(5)
    covered, stopped_early = 0, 0
    trials = 120
    for i in range(trials):
        true = (1.3, 1.9, 2.4, 0.8)[i % 4]
        s = _sequential(POINTS_RULE, true, 0.15, rng)
        figure, _ = stats.summarize([s])
        _, lo, hi = stats.ratio_ci(s.baseline, s.submission)
        assert (figure.ci_low, figure.ci_high) == (round(lo, 4), round(hi, 4))
        if len(s.submission) < POINTS_RULE.max_reps:
            stopped_early += 1
            assert 40 * (curve_share(hi, 1.0, 2.0) - curve_share(lo, 1.0, 2.0)) <= 1.0
        covered += lo <= true <= hi
    assert stopped_early >= trials // 4  # the clear cases (2.4 and 0.8) stopped early
    assert covered >= 0.88 * trials, covered  # nominal 95 %
