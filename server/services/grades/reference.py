"""The reference's speedup that gradings are anchored to (runners/measure/anchor.py), pooled.

A grading anchored to the reference scales every student's figure by S_ref, the reference's own
speedup over the serial baseline on the runner class. Validation measures it (three gradings of
the reference, in one hour), and an hour can be a bad one: measured on 2026-11-28, t1's
reference read 0.84, 0.99 and 1.34 in the three, and the median sank every anchored figure of
that hour. But every anchored grading times the reference beside the baseline as well, and
reports that ratio (the anchor's `reference_measured`): over a term that is hundreds of
measurements, at quiet and busy times, interleaved with everything else the node does. So:

    S_ref = median of the votes: the validation's figure, and each student's median over the
            measurements their gradings (and final-run turns) made of this version

One vote per student, so a student who submits fifty times moves it no more than one who
submits once; a measurement comes from the reference's and the baseline's runs (the student's
code frozen or ended meanwhile), never from the student's own figure. A version with no
validation figure has no S_ref (nothing is anchored). A final run fixes the pooled figure at its
start for all of its turns (services/grades/finals.py), so one run scales every student alike.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from runners.protocol import GradeReport
from server.models import AssignmentVersion, ReferenceFigure


@dataclass(frozen=True)
class Pooled:
    figure: float
    validated: float
    students: int
    """Students whose gradings measured it (the votes beside the validation's)."""


def validated(version: AssignmentVersion) -> float | None:
    """The reference's speedup its validation measured, if any."""
    for check in version.checks or []:
        if check.get("figure") is not None and str(check.get("name", "")).startswith(
                "reference speeds up"):
            return float(check["figure"])
    return None


def pooled(*, session: Session, version: AssignmentVersion) -> Pooled | None:
    """The validation's figure and each student's median measurement, their median."""
    first = validated(version)
    if first is None:
        return None
    per_student: dict[int, list[float]] = defaultdict(list)
    for user_id, figure in session.execute(
            select(ReferenceFigure.user_id, ReferenceFigure.figure)
            .where(ReferenceFigure.version_id == version.id)):
        per_student[user_id].append(figure)
    votes = [first, *(statistics.median(v) for v in per_student.values())]
    return Pooled(figure=round(statistics.median(votes), 4), validated=first,
                  students=len(per_student))


def speedup(*, session: Session, version: AssignmentVersion) -> float | None:
    """The figure a grading of `version` is anchored to now (None: none)."""
    found = pooled(session=session, version=version)
    return None if found is None else found.figure


def record(*, session: Session, version_id: int, user_id: int, report: GradeReport,
           final: bool = False) -> None:
    """Keep the reference's speedup that `report`'s grading measured, if it anchored."""
    anchor = report.speedup.anchor if report.speedup is not None else None
    if anchor is None or anchor.reference_measured is None:
        return
    session.add(ReferenceFigure(version_id=version_id, user_id=user_id,
                                figure=anchor.reference_measured, final=final))
