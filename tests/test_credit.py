"""Speedup credit: CPU time measured from outside every sandbox, and the policy that
credits only the speedup parallel work explains. Gradings of the cheat classes are in
tests/test_redteam_credit.py."""

from __future__ import annotations

import pytest

from runners.measure import anchor, credit, stats
from runners.protocol import Anchor, Credit, Parallelism, ScalingPoint, SpeedupFigure, credited_speedup
from runners.sandbox import base, cgroups
from tests.conftest import SessionFactory

BUSY = """
import multiprocessing as mp, os, time

def spin(seconds):  # CPU seconds, however busy the machine is
    until = time.process_time() + seconds
    while time.process_time() < until:
        pass

def two(seconds):
    ps = [mp.Process(target=spin, args=(seconds,)) for _ in range(2)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    return 2

def idle(seconds):
    time.sleep(seconds)
    return 0

def reset_accounting(seconds):
    # Try to zero or lower every CPU counter this program can reach, then do the work.
    touched = []
    for root, _dirs, files in os.walk("/sys/fs/cgroup"):
        for f in files:
            if f in ("cpuacct.usage", "cpu.stat", "cgroup.procs"):
                try:
                    with open(os.path.join(root, f), "w") as fh:
                        fh.write("0")
                    touched.append(f)
                except OSError:
                    pass
    spin(seconds)
    return touched
"""


@pytest.mark.parametrize("backend", ["bwrap", "process"])
def test_cpu_time_of_every_process_is_read_from_outside(make_session: SessionFactory,
                                                        backend: str) -> None:
    s = make_session(BUSY, backend=backend, cpus=(0, 1))
    s.call("two", 0.4)
    assert s.last_cpu_s is not None and 0.75 < s.last_cpu_s < 1.3, s.last_cpu_s  # two children
    s.call("idle", 0.4)
    assert s.last_cpu_s is not None and s.last_cpu_s < 0.1, s.last_cpu_s


@pytest.mark.parametrize("backend", ["bwrap", "process"])
def test_the_submission_cannot_lower_its_cpu_time(make_session: SessionFactory,
                                                  backend: str) -> None:
    s = make_session(BUSY, backend=backend, cpus=(0,))
    touched, _ = s.call("reset_accounting", 0.4)
    assert touched == []  # nothing writable
    assert s.last_cpu_s is not None and s.last_cpu_s > 0.38, s.last_cpu_s


def test_without_a_cgroup_the_process_tree_is_counted(make_session: SessionFactory,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    create = cgroups.create

    def without_accounting(**kw: object) -> cgroups.RunCgroup:
        cg = create(**kw)  # type: ignore[arg-type]
        cg.cpu_dir = None  # as on a host with no cpuacct / cpu.stat
        return cg

    monkeypatch.setattr(cgroups, "create", without_accounting)
    s = make_session(BUSY, backend="bwrap", cpus=(0, 1))
    s.call("two", 0.4)  # children reaped during the call count through their parent
    assert s.last_cpu_s is not None and 0.7 < s.last_cpu_s < 1.3, s.last_cpu_s
    assert base.tree_cpu_seconds(2 ** 22 + 7) is None  # no such process


# The policy -------------------------------------------------------------------------------
def _figures(speedup: float, *, busy: float | None, work: float, base_busy: float = 1.0,
             width: float = 0.1, busy_ci: tuple[float, float] | None = None,
             ) -> tuple[SpeedupFigure, ScalingPoint]:
    lo, hi = busy_ci or ((busy * 0.9, busy * 1.1) if busy is not None else (0.0, 0.0))
    fig = SpeedupFigure(median=speedup, ci_low=speedup * (1 - width),
                        ci_high=speedup * (1 + width), baseline_median_s=0.3,
                        submission_median_s=0.3 / speedup, repetitions=8)
    cpu = None if busy is None else Parallelism(
        parallelism=busy, parallelism_ci_low=lo, parallelism_ci_high=hi,
        baseline_parallelism=base_busy, work_ratio=work, work_ratio_ci_low=work * 0.9,
        work_ratio_ci_high=work * 1.1, submission_cpu_median_s=0.3 * work,
        baseline_cpu_median_s=0.3)
    point = ScalingPoint(workers=2, speedup=speedup, efficiency=speedup / 2,
                         ci_low=fig.ci_low, ci_high=fig.ci_high,
                         submission_median_s=fig.submission_median_s, cpu=cpu)
    return fig, point


def decide(speedup: float, *, busy: float | None, work: float, width: float = 0.1,
           policy: str = "parallel", busy_ci: tuple[float, float] | None = None) -> Credit:
    fig, point = _figures(speedup, busy=busy, work=work, width=width, busy_ci=busy_ci)
    return credit.decide(policy=policy, figure=fig, point=point, cores=2)


def test_policy_cases_from_the_measurements() -> None:
    # Figures as bench.credit measured them (assignments/README.md).
    parallel = decide(1.7, busy=1.85, work=1.07)  # t1 reference
    assert parallel.status == "credited" and "parallel execution explains" in parallel.reason
    # A plain loop timed at 0.96×, or a leaner one at 1.10×: no parallel work, no points.
    for s, w in ((0.96, 1.03), (1.10, 0.91)):
        serial = decide(s, busy=1.0, work=w, busy_ci=(0.97, 1.02))
        assert serial.status == "refused" and serial.speedup == 0, serial
        assert "no parallel work" in serial.reason and "earns no performance points" in serial.reason
        assert "parallel execution explains" not in serial.reason
    closed = decide(3551.0, busy=0.64, work=1 / 5495)
    assert closed.status == "refused" and closed.speedup == 0
    assert "1/5,495 of the baseline's work on 0.6 busy cores" in closed.reason
    assert "does not come from parallel execution" in closed.reason
    assert decide(10.4, busy=0.99, work=0.095).status == "refused"  # serial NumPy
    assert decide(26.0, busy=0.98, work=0.04).status == "refused"  # pool dressing
    assert decide(14.0, busy=1.7, work=0.11).status == "held"  # NumPy inside a pool: review
    # The same pool measured low on a shared 2-vCPU node (short calls scatter the busy cores):
    # a median of 1.1 whose CI reaches 1.8 is not surely serial, so review, not refusal.
    assert decide(33.0, busy=1.11, work=0.037, busy_ci=(1.05, 1.80)).status == "held"
    assert decide(33.0, busy=1.11, work=0.037, busy_ci=(1.05, 1.20)).status == "refused"
    assert decide(2000.0, busy=2.0, work=1e-3).status == "held"  # idle ranks that poll
    # Superlinear with the baseline's work: held; parallel gain smaller than the speedup: capped.
    assert decide(3.5, busy=2.0, work=0.6, width=0.02).status == "held"
    capped = decide(1.9, busy=1.2, work=0.63)
    assert capped.status == "capped" and capped.speedup == pytest.approx(1.2)  # G < 1.25: no tolerance
    # One busy core with a bit more than half the work: nothing (one core's speed).
    serial = decide(1.67, busy=1.0, work=0.6)
    assert serial.status == "refused" and serial.speedup == 0


def test_a_starved_node_does_not_turn_two_low_figures_into_a_gain() -> None:
    """A serial file on a node short of cores: 0.7 busy cores against the baseline's 0.6 is a
    ratio of 1.17 (CI to 1.3), yet never more than one core's worth; a parallel file on a
    whole node is still credited."""
    fig, point = _figures(1.22, busy=0.7, work=0.96, base_busy=0.6, busy_ci=(0.6, 0.8))
    starved = credit.decide(policy="parallel", figure=fig, point=point, cores=2)
    assert starved.status == "refused" and "no parallel work" in starved.reason, starved
    assert "against the baseline's 0.6" in starved.reason
    # A closed form there (1/1,404 of the work on 0.9 busy cores, CI to 1.0): refused, not held
    # for review as if parallel (a SLURM node in CI read it so, 2026-12-02).
    fig, point = _figures(1292.0, busy=0.9, work=1 / 1404, base_busy=0.6, busy_ci=(0.8, 1.0))
    closed = credit.decide(policy="parallel", figure=fig, point=point, cores=2)
    assert closed.status == "refused" and "does not come from parallel" in closed.reason, closed
    fig, point = _figures(1.8, busy=1.9, work=1.05, base_busy=1.0)
    assert credit.decide(policy="parallel", figure=fig, point=point, cores=2).status == "credited"
    # One allotted core: nothing could be parallel, and the rule does not ask it to be.
    fig, point = _figures(1.05, busy=1.0, work=0.95)
    one = credit.decide(policy="parallel", figure=fig, point=point, cores=1)
    assert one.status == "credited", one


def test_a_busy_node_leaves_only_the_verdicts_it_cannot_explain() -> None:
    """Less work than the baseline (a work ratio) and a hold for a person stand on a busy node;
    a credited speedup and a refusal for no parallel work may be the node's doing."""
    def stands(speedup: float, **kw: float) -> bool:
        fig, point = _figures(speedup, **kw)  # type: ignore[arg-type]
        return credit.stands_on_a_busy_node(
            credit.decide(policy="parallel", figure=fig, point=point, cores=2), point)
    assert stands(3551.0, busy=0.64, work=1 / 5495)  # a closed form: refused, whatever the node
    assert stands(14.0, busy=1.7, work=0.11)  # NumPy in a pool: held
    assert not stands(1.7, busy=1.85, work=1.07)  # credited: the node may have lowered it
    assert not stands(1.22, busy=0.7, work=0.96, base_busy=0.6)  # starved: no parallel work


def test_unmeasured_parallelism_falls_back_to_the_cores_cap() -> None:
    within = decide(1.9, busy=None, work=1.0)
    assert within.status == "credited" and not within.measured
    assert decide(2.4, busy=None, work=1.0).speedup == pytest.approx(2.3)  # capped at the cores
    assert decide(2.4, busy=1.6, work=0.67).speedup == pytest.approx(1.84)  # G × 1.15 (noise)
    assert decide(40.0, busy=None, work=1.0).status == "held"


def test_any_credits_everything_and_gpu_compares_with_the_reference() -> None:
    assert decide(3551.0, busy=0.64, work=1e-4, policy="any").status == "credited"
    fig, point = _figures(30.0, busy=None, work=1.0)
    held = credit.decide(policy="parallel", figure=fig, point=point, cores=1,
                         reference_speedup=5.0, reference_factor=3.0, gpu=True)
    assert held.status == "held" and "3 times the reference solution's 5.00×" in held.reason
    ok = credit.decide(policy="parallel", figure=fig, point=point, cores=1,
                       reference_speedup=12.0, reference_factor=3.0, gpu=True)
    assert ok.status == "credited"


def test_points_come_from_the_credited_speedup_or_a_grant() -> None:
    refused = decide(40.0, busy=1.0, work=0.02)
    assert credited_speedup(refused, 40.0) is None
    assert credited_speedup(refused, 40.0, review="granted") == 40.0
    assert credited_speedup(None, 40.0, review="refused") is None  # a pre-policy report
    assert credited_speedup(decide(1.9, busy=1.2, work=0.63), 1.9) == pytest.approx(1.2)
    assert credited_speedup(None, 1.5) == 1.5  # a report from before the policy


def test_no_negative_serial_fraction() -> None:
    assert stats.karp_flatt(2.5, 2) is None
    assert stats.karp_flatt(1.5, 2) == pytest.approx(1 / 3)
    assert stats.amdahl_fit([(2, 2.6), (4, 5.0)]) is None
    s = stats.Samples(2, baseline=[1.0] * 5, submission=[0.3] * 5,
                       baseline_cpu=[1.0] * 5, submission_cpu=[0.6] * 5)
    _, points = stats.summarize([s])
    assert points[0].karp_flatt is None and points[0].cpu is not None
    assert points[0].cpu.parallelism == pytest.approx(2.0)
    assert points[0].cpu.work_ratio == pytest.approx(0.6)
    s.submission_cpu[2] = None  # one call unmeasured: no figure at all rather than a biased one
    assert stats.parallelism(s) is None


def _anchored(speedup: float, *, busy: float, base_busy: float, beside: float | None
              ) -> Credit:
    """An anchored figure of `speedup` (the reference's 1.9× × r) on `busy` cores against the
    baseline's `base_busy`, and `beside` times the reference's busy cores in the same turns."""
    fig, point = _figures(speedup, busy=busy, work=1.0, base_busy=base_busy)
    pinned = Anchor(reference_speedup=1.9, versus_reference=speedup / 1.9, versus_ci_low=0.9,
                    versus_ci_high=1.1, reference_median_s=0.2, turns=6,
                    baseline_speedup=1.3, cores_versus_reference=beside)
    return credit.decide(policy="parallel", figure=fig.model_copy(update={"anchor": pinned}),
                         point=point, cores=2)


def test_an_anchored_figure_is_explained_by_busy_cores_beside_the_reference() -> None:
    """A host that slows cores unseen lowers the busy cores against the serial baseline (1.4
    here: 1.61× explained); beside the reference, in the same turns, the submission kept as
    many cores busy as it: its 2.0× is explained by the reference's parallel 1.9×."""
    beside = _anchored(2.0, busy=1.4, base_busy=1.0, beside=1.0)
    assert beside.status == "credited" and beside.speedup == 2.0, beside
    assert "1.00× the reference's beside it" in beside.reason
    plain = _anchored(2.0, busy=1.4, base_busy=1.0, beside=None)  # CPU time beside not read
    assert plain.status == "capped" and plain.speedup == pytest.approx(1.4 * 1.15)
    # A serial answer beside the reference: one busy core, so nothing, whatever r says.
    serial = _anchored(1.2, busy=1.0, base_busy=1.0, beside=0.52)
    assert serial.status == "refused" and serial.speedup == 0, serial


def test_the_anchor_reads_busy_cores_beside_the_reference_turn_by_turn() -> None:
    s = stats.Samples(2, baseline=[0.4] * 4, reference=[0.2, 0.3, 0.2, 0.2],
                      submission=[0.2, 0.3, 0.4, 0.2])
    s.reference_cpu.extend([0.38, 0.57, 0.38, 0.38])  # 1.9 busy cores in every turn
    s.submission_cpu.extend([0.38, 0.57, 0.38, 0.2])  # 1.9, 1.9, 0.95, 1.0
    a = anchor.measure(s, 1.9)
    assert a is not None and a.cores_versus_reference == pytest.approx(0.763, abs=1e-3)
    s.submission_cpu[2] = None  # one call's CPU time not read: no figure rather than a guess
    a = anchor.measure(s, 1.9)
    assert a is not None and a.cores_versus_reference is None
