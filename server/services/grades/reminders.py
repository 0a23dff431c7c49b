"""Deadline reminders: a student whose own deadline (extensions included) is within
`AHEAD_S` and who has no passing submission yet (nothing on the board: a team's counts for its
members) is told once per assignment. Looked at by the reaper's pass; an extension that moves
the deadline does not tell again."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from server.models import Assignment, BoardEntry, Course, aware, now
from server.services.grades import extensions
from server.services.notices import notify
from server.services.people import courses

AHEAD_S = 24 * 3600
LATEST_EXTENSION_S = 30 * 86400
"""How far past the assignment's own deadline an extension is looked for."""


def remind_due(*, session: Session) -> int:
    """Tell the students due a reminder; how many were told."""
    clock = now()
    soon = clock + timedelta(seconds=AHEAD_S)
    told = 0
    for a in session.scalars(select(Assignment).where(
            Assignment.deadline.is_not(None),
            Assignment.deadline > clock - timedelta(seconds=LATEST_EXTENSION_S),
            Assignment.current_version_id.is_not(None))):
        passing = set(session.scalars(select(BoardEntry.user_id).where(
            BoardEntry.assignment_id == a.id)))
        course = session.get(Course, a.course_id)
        assert course is not None
        for student in courses.students(session=session, course=course):
            if student.id in passing:
                continue
            due = extensions.deadline_for(session=session, assignment=a, user_id=student.id)
            if due is None or not clock < aware(due) <= soon:
                continue
            key = f"deadline:{a.id}"
            if notify.exists(session=session, user_id=student.id, key=key):
                continue
            hours = max(1, round((aware(due) - clock).total_seconds() / 3600))
            notify.notify(session=session, user_id=student.id, kind="deadline", key=key,
                          link=f"/c/{course.slug}/{a.slug}",
                          title=f"{a.title}: due in about {hours} h "
                                f"({aware(due):%Y-%m-%d %H:%M} UTC)",
                          body="You have no submission that passes the tests yet.")
            told += 1
    return told
