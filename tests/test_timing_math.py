"""Speedup statistics: CI coverage, Karp–Flatt, Amdahl fit, the points curve."""

import numpy as np
import pytest

from runners import timing


def test_ratio_ci_brackets_the_median_ratio() -> None:
    rng = np.random.default_rng(1)
    base = list(1.0 + 0.05 * rng.standard_normal(30))
    sub = list(0.5 + 0.025 * rng.standard_normal(30))
    point, lo, hi = timing.ratio_ci(base, sub)
    assert lo < point < hi
    assert 1.9 < point < 2.1
    assert hi - lo < 0.3


def test_ratio_ci_covers_the_truth_most_of_the_time() -> None:
    rng = np.random.default_rng(7)
    covered = 0
    for i in range(100):
        base = list(rng.lognormal(0.0, 0.1, 15))
        sub = list(rng.lognormal(np.log(0.5), 0.1, 15))
        _, lo, hi = timing.ratio_ci(base, sub, seed=i)
        covered += lo <= 2.0 <= hi
    assert covered >= 85  # nominal 95 %; percentile bootstrap on n=15 runs a little narrow


def test_wider_noise_gives_a_wider_interval() -> None:
    rng = np.random.default_rng(3)
    z = rng.standard_normal(20)
    _, lo1, hi1 = timing.ratio_ci(list(1 + 0.01 * z), list(0.5 + 0.005 * z[::-1]))
    _, lo2, hi2 = timing.ratio_ci(list(1 + 0.2 * z), list(0.5 + 0.1 * z[::-1]))
    assert hi2 - lo2 > 5 * (hi1 - lo1)


def test_karp_flatt() -> None:
    assert timing.karp_flatt(2.0, 2) == pytest.approx(0.0)
    assert timing.karp_flatt(1.0, 4) == pytest.approx(1.0)
    assert timing.karp_flatt(1.6, 2) == pytest.approx(0.25)
    assert timing.karp_flatt(3.0, 1) is None


def test_amdahl_fit_recovers_the_serial_fraction() -> None:
    f = 0.1
    points = [(p, 1 / (f + (1 - f) / p)) for p in (1, 2, 4, 8, 16)]
    assert timing.amdahl_fit(points) == pytest.approx(f, abs=0.002)
    assert timing.amdahl_fit([(1, 1.0)]) is None


def test_performance_curve_is_continuous_and_clamped() -> None:
    assert timing.performance_share(0.5, 1.0, 2.0) == 0.0
    assert timing.performance_share(1.5, 1.0, 2.0) == pytest.approx(0.5)
    assert timing.performance_share(3.0, 1.0, 2.0) == 1.0
    a, b = timing.performance_share(1.50, 1.0, 2.0), timing.performance_share(1.52, 1.0, 2.0)
    assert abs(a - b) < 0.05  # noise moves points little
