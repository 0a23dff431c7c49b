"""Points are computed in one place (runners/protocol/points.py): the score a runner reports and
the score the server stores agree for every verdict, credit and curve of the shipped packages'
real reports (tests/fixtures/reports), and a course's own curve or a review changes only what it
should."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runners import package
from runners.protocol import GradeReport, points
from server.models import Assignment, AssignmentVersion, Submission
from server.services.grades import grading

REPO = Path(__file__).resolve().parents[1]
KEPT = {f.stem: json.loads(f.read_text()) for f in sorted((REPO / "tests/fixtures/reports")
                                                           .glob("*.json"))}


def _submission(kept: dict[str, Any], **course: Any) -> Submission:
    """A submission of the report's package, as the server holds it (not stored)."""
    manifest = package.load(REPO / kept["package"]).manifest
    a = Assignment(slug=manifest.slug, title=manifest.title, late_policy="none", late_penalty=0.0,
                   speedup_min=course.get("speedup_min"), speedup_full=course.get("speedup_full"))
    return Submission(assignment=a, late=False, version=AssignmentVersion(
        manifest=manifest.model_dump(mode="json", by_alias=True)))


@pytest.mark.parametrize("name", sorted(KEPT))
def test_the_runners_score_is_the_one_the_server_stores(name: str) -> None:
    """The server's own computation (as under a course curve equal to the package's) gives the
    score the runner reported, whatever the verdict, the credit and the curve."""
    kept = KEPT[name]
    report = GradeReport.model_validate(kept["report"])
    scoring = package.load(REPO / kept["package"]).manifest.scoring
    same_curve = _submission(kept, speedup_min=scoring.speedup_min,
                             speedup_full=scoring.speedup_full)
    assert grading.course_score(sub=same_curve, report=report) == report.score, name
    assert grading.points(sub=_submission(kept), report=report,
                          earned=points.earned_speedup(report)) == report.score, name
    assert grading.course_score(sub=_submission(kept), report=report) == report.score, name


def test_verdicts_credits_and_curves_are_all_covered() -> None:
    reports = [k["report"] for k in KEPT.values()]
    assert {r["verdict"] for r in reports} >= {"passed", "failed", "platform_error"}
    assert {r["credit"]["status"] for r in reports if r["credit"]} >= {
        "credited", "held", "refused"}
    assert any(r["weak_scaling"] for r in reports)  # the weak-scaling curve's share too


def test_a_course_curve_and_a_review_change_only_the_performance_points() -> None:
    kept = KEPT["t2-closed-form"]  # held for review: no performance points until then
    report = GradeReport.model_validate(kept["report"])
    sub = _submission(kept)
    assert grading.course_score(sub=sub, report=report) == report.test_points
    granted = grading.course_score(sub=sub, report=report, review="granted")
    assert granted == report.max_score  # its measured 899× earns them all once granted
    ref = GradeReport.model_validate(KEPT["t2-reference"]["report"])
    earned = points.earned_speedup(ref)
    assert earned is not None
    steep = _submission(KEPT["t2-reference"], speedup_min=earned, speedup_full=earned * 2)
    assert grading.course_score(sub=steep, report=ref) == ref.test_points  # at min: nothing
    wrong = GradeReport.model_validate(KEPT["t1-wrong"]["report"])
    assert grading.course_score(sub=_submission(KEPT["t1-wrong"]), report=wrong,
                                review="granted") == wrong.test_points  # not passed: no speedup
