"""Announcements: a course's staff tell its students something (a correction, a new deadline),
the whole course or about one assignment; each student is notified (and e-mailed as they
chose), and the course page lists them, newest first."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from runners.protocol import text
from server.models import Announcement, Assignment, AuditLog, Course, User
from server.services.notices import notify
from server.services.people import courses
from server.services.records.errors import Forbidden, Invalid

TITLE_MAX = 200
BODY_MAX = 10_000
SHOWN = 20


def post(*, session: Session, course: Course, actor: User, role: str | None, title: str,
         body: str, assignment: Assignment | None = None) -> Announcement:
    """Post an announcement and notify every student of the course."""
    if not courses.is_staff(role):
        raise Forbidden("only the course's instructors and TAs post announcements")
    title, body = title.strip(), body.strip()
    if not title or len(title) > TITLE_MAX:
        raise Invalid(f"an announcement's title holds 1 to {TITLE_MAX} characters")
    if (why := text.problem(title, "the title")) is not None:
        raise Invalid(why)
    if len(body) > BODY_MAX:
        raise Invalid(f"an announcement holds at most {BODY_MAX} characters")
    if (why := text.paragraphs_problem(body, "the announcement")) is not None:
        raise Invalid(why)
    a = Announcement(course_id=course.id, assignment_id=assignment.id if assignment else None,
                     author_id=actor.id, title=title, body=body)
    session.add(a)
    session.flush()
    where = f"{course.title}" + (f", {assignment.title}" if assignment else "")
    for student in courses.students(session=session, course=course):
        notify.notify(session=session, user_id=student.id, kind="announcement",
                      key=f"announcement:{a.id}", title=f"{where}: {title}", body=body,
                      link=f"/c/{course.slug}#announcements")
    session.add(AuditLog(actor_id=actor.id, action="announcement.post",
                         target=f"{course.slug}", detail={"announcement": a.id,
                                                          "assignment": a.assignment_id}))
    session.flush()
    return a


def of_course(*, session: Session, course: Course,
              assignment: Assignment | None = None) -> list[Announcement]:
    """The course's latest announcements (with an assignment: the course's and its own)."""
    q = select(Announcement).where(Announcement.course_id == course.id)
    if assignment is not None:
        q = q.where((Announcement.assignment_id.is_(None))
                    | (Announcement.assignment_id == assignment.id))
    return list(session.scalars(q.order_by(Announcement.id.desc()).limit(SHOWN)))
