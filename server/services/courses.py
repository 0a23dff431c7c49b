"""Courses, join codes and roles."""

from __future__ import annotations

import re

from sqlalchemy import select
from sqlalchemy.orm import Session

from runners.protocol import SLUG_RE
from server import security
from server.models import AuditLog, Course, Enrollment, User
from server.services.errors import Conflict, Forbidden, NotFound


def create(*, session: Session, actor: User, slug: str, title: str) -> Course:
    """A course with a fresh join code; its creator is its first instructor."""
    if not actor.is_instructor:
        raise Forbidden("only instructors create courses")
    if session.scalar(select(Course).where(Course.slug == slug)):
        raise Conflict(f"course {slug!r} exists")
    course = Course(slug=slug, title=title, join_code=security.join_code())
    session.add(course)
    session.flush()
    session.add(Enrollment(user_id=actor.id, course_id=course.id, role="instructor"))
    session.add(AuditLog(actor_id=actor.id, action="course.create", target=slug))
    session.flush()
    return course


def by_slug(*, session: Session, slug: str) -> Course:
    # Not a slug, not a course; and never a query (PostgreSQL refuses text with NUL in it).
    course = session.scalar(select(Course).where(Course.slug == slug)) \
        if re.fullmatch(SLUG_RE, slug) else None
    if course is None:
        raise NotFound(f"no course {slug!r}")
    return course


def join(*, session: Session, user: User, join_code: str, alias: str | None = None) -> Enrollment:
    """Enroll as a student with a course's join code."""
    course = session.scalar(select(Course).where(Course.join_code == join_code.strip()))
    if course is None:
        raise NotFound("no course has this join code")
    existing = session.scalar(select(Enrollment).where(Enrollment.user_id == user.id,
                                                       Enrollment.course_id == course.id))
    if existing is not None:
        return existing
    if alias is None:  # the alias this student already shows on other leaderboards, if any
        alias = session.scalar(select(Enrollment.alias).where(
            Enrollment.user_id == user.id, Enrollment.alias.is_not(None))
            .order_by(Enrollment.id).limit(1))
    enrollment = Enrollment(user_id=user.id, course_id=course.id, role="student", alias=alias)
    session.add(enrollment)
    session.flush()
    return enrollment


def role(*, session: Session, user: User, course: Course) -> str | None:
    """'instructor', 'student', or None when not enrolled."""
    return session.scalar(select(Enrollment.role).where(Enrollment.user_id == user.id,
                                                        Enrollment.course_id == course.id))


def mine(*, session: Session, user: User) -> list[tuple[Course, str]]:
    rows = session.execute(select(Course, Enrollment.role).join(
        Enrollment, Enrollment.course_id == Course.id).where(Enrollment.user_id == user.id))
    return [(c, r) for c, r in rows]
