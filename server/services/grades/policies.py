"""An assignment's policy, set by its instructors: deadline, late policy and penalty, quotas, and
the scoring curve (a changed curve rescores every stored grade; nothing is run again)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from server.models import Assignment, AuditLog, User
from server.services.grades import grading
from server.services.packages.assignments import manifest_of
from server.services.records.errors import Forbidden, Invalid

CLEARABLE = frozenset({"deadline", "team_lock_at"})
"""The settings `null` clears (the rest keep their value unless given one)."""


def update(*, session: Session, actor: User, assignment: Assignment, role: str | None,
           changes: dict[str, Any]) -> Assignment:
    """Deadline, late policy, quotas, scoring curve, practice limits and team work (instructors
    only); audit-logged."""
    if role != "instructor":
        raise Forbidden("only the course's instructors change assignments")
    for key, value in changes.items():
        if value is None and key not in CLEARABLE:
            raise Invalid(f"{key} cannot be null (leave it out to keep its value)")
        if key in CLEARABLE and isinstance(value, datetime):
            if value.tzinfo is None:
                raise Invalid(f"{key} needs a time zone (e.g. 2026-12-01T23:59:00+01:00)")
            try:
                value = value.astimezone(UTC)  # SQLite drops the offset: store every time in UTC
            except OverflowError as exc:  # 9999-12-31T23:59-12:00 is in the year 10000
                raise Invalid(f"{key} is out of range (years 1 to 9999 in UTC)") from exc
        setattr(assignment, key, value)
    if {"team_min", "team_max"} & changes.keys() and (
            assignment.team_min > (assignment.team_max or 1)):
        raise Invalid(f"a team's least size ({assignment.team_min}) is above its most "
                      f"({assignment.team_max or 1})")
    if {"speedup_min", "speedup_full"} & changes.keys():
        scoring = manifest_of(assignment).scoring
        lo = assignment.speedup_min or scoring.speedup_min
        hi = assignment.speedup_full or scoring.speedup_full
        if hi <= lo:
            raise Invalid(f"the full-points speedup ({hi:g}) must be above the starting one ({lo:g})")
        session.flush()
        grading.rescore(session=session, assignment=assignment)
    session.add(AuditLog(actor_id=actor.id, action="assignment.update",
                         target=f"{assignment.course.slug}/{assignment.slug}",
                         detail={k: str(v) for k, v in changes.items()}))
    session.flush()
    return assignment
