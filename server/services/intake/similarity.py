"""Similarity runs: an instructor compares every student's latest (or best) submission of an
assignment. The comparison runs on a runner (a `similarity` job, copydetect, text only); the
web process only chooses the submissions, stores the pairs and shows them side by side."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from runners.protocol import SimilarPair, submission_text
from server.models import (
    Assignment,
    AuditLog,
    BoardEntry,
    Enrollment,
    SimilarityRun,
    Submission,
    User,
)
from server.services import MAX_ROW_ID
from server.services.packages.assignments import safe_members
from server.services.people import courses, teams
from server.services.records import artifacts, jobs
from server.services.records.errors import Forbidden, Invalid, NotFound

BASES = ("latest", "best")


def chosen(*, session: Session, assignment: Assignment, basis: str) -> list[int]:
    """One submission per student (per team: its members share it): their latest (not
    cancelled), or the one their leaderboard entry shows (`best`; their latest when nothing
    passed)."""
    students = select(Enrollment.user_id).where(Enrollment.course_id == assignment.course_id,
                                                 Enrollment.role == "student")
    pairs = teams.sharers()
    latest: dict[int, int] = {user: sid for user, sid in session.execute(
        select(pairs.c.uid, func.max(Submission.id)).join(pairs, pairs.c.sid == Submission.id)
        .where(Submission.assignment_id == assignment.id, Submission.status != "cancelled",
               pairs.c.uid.in_(students))
        .group_by(pairs.c.uid))}
    if basis == "best":
        latest |= {user: sid for user, sid in session.execute(
            select(BoardEntry.user_id, BoardEntry.submission_id)
            .where(BoardEntry.assignment_id == assignment.id,
                   BoardEntry.user_id.in_(students)))}
    return sorted(set(latest.values()))


def start(*, session: Session, actor: User, assignment: Assignment, role: str | None,
          basis: str, threshold: float) -> SimilarityRun:
    """Queue a similarity run over the students' submissions (audit-logged)."""
    if not courses.is_staff(role):
        raise Forbidden("only the course's instructors and TAs run similarity checks")
    if basis not in BASES:
        raise Invalid(f"basis must be one of {', '.join(BASES)}")
    if not 0 < threshold <= 1:
        raise Invalid("threshold is a share of a submission's code: above 0, at most 1")
    ids = chosen(session=session, assignment=assignment, basis=basis)
    if len(ids) < 2:
        raise Invalid(f"{assignment.slug} has submissions of {len(ids)} student"
                      f"{'s' * (len(ids) != 1)}; a similarity run compares at least two")
    assert assignment.current_version_id is not None
    run = SimilarityRun(assignment_id=assignment.id, version_id=assignment.current_version_id,
                        requested_by=actor.id, basis=basis, threshold=threshold,
                        submission_ids=ids)
    session.add(run)
    session.flush()
    jobs.enqueue_similarity(session=session, run=run)
    session.add(AuditLog(actor_id=actor.id, action="similarity.start",
                         target=f"{assignment.course.slug}/{assignment.slug}",
                         detail={"run": run.id, "basis": basis, "threshold": threshold,
                                 "submissions": len(ids)}))
    session.flush()
    return run


def of_assignment(*, session: Session, assignment: Assignment) -> list[SimilarityRun]:
    return list(session.scalars(select(SimilarityRun).where(
        SimilarityRun.assignment_id == assignment.id).order_by(SimilarityRun.id.desc())))


def get(*, session: Session, assignment: Assignment, run_id: int) -> SimilarityRun:
    run = session.get(SimilarityRun, run_id) if 0 < run_id <= MAX_ROW_ID else None
    if run is None or run.assignment_id != assignment.id:
        raise NotFound(f"no similarity run {run_id} of {assignment.slug}")
    return run


@dataclass(frozen=True)
class Side:
    submission: Submission
    who: str  # "Name <email>" (staff only see this page)
    share: float
    lines: list[tuple[str, bool]]  # each line of its submission_text, and whether it matched


def pairs(run: SimilarityRun) -> list[SimilarPair]:
    return [SimilarPair.model_validate(p) for p in (run.result or {}).get("pairs", [])]


def owners(*, session: Session, found: list[SimilarPair]) -> dict[int, User]:
    """Whose submission each id of these pairs is."""
    ids = {i for p in found for i in (p.a, p.b)}
    return {s.id: s.user for s in session.scalars(select(Submission).where(Submission.id.in_(ids)))}


def side_by_side(*, session: Session, run: SimilarityRun, index: int,
                 artifacts_root: Path) -> tuple[Side, Side]:
    """The `index`-th pair of a run, each side's text with its matching lines marked."""
    found = pairs(run)
    if not 0 <= index < len(found):
        raise NotFound(f"run {run.id} has no pair {index + 1}")
    p = found[index]

    def side(sid: int, share: float, ranges: list[tuple[int, int]]) -> Side:
        sub = session.get(Submission, sid)
        if sub is None:
            raise NotFound(f"submission {sid} no longer exists")
        text = submission_text(safe_members(
            artifacts.read(root=artifacts_root, sha256=sub.archive_sha256)))
        hit = {n for lo, hi in ranges for n in range(lo, hi + 1)}
        return Side(sub, f"{sub.user.name} <{sub.user.email}>", share,
                    [(line, n in hit) for n, line in enumerate(text.splitlines(), start=1)])

    return side(p.a, p.share_a, p.lines_a), side(p.b, p.share_b, p.lines_b)
