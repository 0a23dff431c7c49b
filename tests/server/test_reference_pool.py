"""The reference's speedup that gradings are anchored to, pooled over the version's gradings
(server/services/grades/reference.py): the validation's figure and one vote per student; a student who
submits again and again counts once; a final run fixes the figure at its start for all of its
turns, whatever its turns measure meanwhile. This test plays the runner."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm.attributes import flag_modified

from runners.protocol import JobOutcome
from server.db import session_factory
from server.models import AssignmentVersion, ReferenceFigure
from tests.server.conftest import REFERENCE, RUNNER, World, claim, login
from tests.server.reports import sample_report

A = "/api/courses/th/assignments/t1-multiprocessing"


def _validated_at(engine: Engine, figure: float) -> None:
    """The version's validation measured the reference at `figure` (as a runner's "reference
    speeds up" check records it)."""
    with session_factory(engine)() as s, s.begin():
        version = s.scalars(select(AssignmentVersion)).one()
        version.checks = [*(version.checks or []),
                          {"name": "reference speeds up (2 workers)", "ok": True,
                           "figure": figure}]
        flag_modified(version, "checks")


def _anchored(measured: float, s_ref: float) -> JobOutcome:
    """A passed grading anchored to `s_ref` whose turns measured the reference at `measured`."""
    report: dict[str, Any] = sample_report(median=s_ref, lo=s_ref * 0.95, hi=s_ref * 1.05)
    report["speedup"]["anchor"] = {
        "reference_speedup": s_ref, "versus_reference": 1.0, "versus_ci_low": 0.98,
        "versus_ci_high": 1.02, "reference_median_s": 0.2, "turns": 6,
        "baseline_speedup": measured, "reference_measured": measured}
    return JobOutcome.model_validate({"report": report})


def _graded(world: World, who: dict[str, str], measured: float, n: int = 1) -> list[float]:
    """`who` submits and is graded `n` times; the figures the jobs were anchored to."""
    figures = []
    for k in range(n):
        r = world.submit(who, REFERENCE + f"\n# {measured} {k}\n".encode())
        assert r.status_code == 201, r.text
        offer = claim(world.client)
        assert offer is not None and offer["job"] is not None, offer
        figures.append(offer["job"]["reference_speedup"])
        _post(world, offer, _anchored(measured, figures[-1]))
    return figures


def _post(world: World, offer: dict[str, Any], outcome: JobOutcome) -> None:
    r = world.client.post(f"/api/runner/jobs/{offer['job_id']}/result",
                          content=outcome.model_dump_json(),
                          headers={**RUNNER, "X-Job-Token": offer["token"],
                                   "Content-Type": "application/json"})
    assert r.status_code == 204, r.text


def test_the_reference_figure_is_pooled_one_vote_per_student(world: World,
                                                              engine: Engine) -> None:
    c = world.client
    _validated_at(engine, 2.0)
    r = c.post("/api/auth/register", json={"email": "cy@uni.edu", "name": "Cy",
                                           "password": "studentpass1", "join_code": world.join_code,
                                           "alias": "cy"})
    assert r.status_code == 201, r.text
    cy = login(c, "cy@uni.edu", "studentpass1")

    assert _graded(world, world.ada, 1.5) == [2.0]  # the validation's figure alone
    assert _graded(world, world.ada, 1.6) == [1.75]  # the median of 2.0 and ada's 1.5
    assert _graded(world, world.bob, 1.7) == [1.775]  # 2.0 and ada's median, 1.55
    # cy submits five times and measures the reference low every time: one vote, the median
    # of 2.0, 1.55, 1.7 and 0.5 (counted per grading, 0.5 would win from cy's third on).
    pooled = 1.625
    assert _graded(world, cy, 0.5, n=5) == [1.7] + [pooled] * 4
    with session_factory(engine)() as s:
        assert len(s.scalars(select(ReferenceFigure)).all()) == 8
    stats = world.get(world.prof, f"{A}/stats")
    assert stats.status_code == 200, stats.text
    assert stats.json()["reference_speedup"] == pooled

    # A final run fixes the pooled figure at its start for every turn.
    r = world.post(world.prof, f"{A}/final-runs", json={"rounds": 2})
    assert r.status_code == 202, r.text
    fixed = []
    while (offer := claim(c)) is not None:
        job = offer["job"]
        assert job["timing_only"], job
        fixed.append(job["reference_speedup"])
        _post(world, offer, _anchored(0.2, job["reference_speedup"]))  # every turn measures low
    assert fixed == [pooled] * 6
    # Its turns are measurements too (each student's vote moves), for the gradings after it.
    assert _graded(world, world.bob, 1.7)[0] < pooled
