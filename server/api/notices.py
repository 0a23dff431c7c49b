"""Notifications and announcements over the API (services/notices/): your notifications, marking
them read, what you are told by e-mail, and a course's announcements."""

from __future__ import annotations

from fastapi import APIRouter, status

from server.db import committing
from server.deps import CourseDep, CourseStaffDep, CurrentUser, SessionDep, SettingsDep
from server.schemas import ErrorPublic
from server.schemas_notices import (
    AnnouncementIn,
    AnnouncementPublic,
    KindChoice,
    NoticeChoicesIn,
    NoticeChoicesPublic,
    NotificationPublic,
    NotificationsPublic,
    ReadIn,
    ReadPublic,
)
from server.services.notices import announcements, notify
from server.services.notices.kinds import KINDS
from server.services.packages import assignments as assignment_service

router = APIRouter(prefix="/api", tags=["notifications"],
                   responses={401: {"model": ErrorPublic}, 403: {"model": ErrorPublic},
                              404: {"model": ErrorPublic}, 422: {"model": ErrorPublic}})


@router.get("/notifications", response_model=NotificationsPublic)
def mine(user: CurrentUser, session: SessionDep) -> NotificationsPublic:
    """Your notifications, the newest first, and how many are unread."""
    return NotificationsPublic(
        unread=notify.unread(session=session, user=user),
        notifications=[NotificationPublic.model_validate(n)
                       for n in notify.latest(session=session, user=user)])


@router.post("/notifications/read", response_model=ReadPublic)
def read(body: ReadIn, user: CurrentUser, session: SessionDep) -> ReadPublic:
    """Mark one notification read (`id`), or all of yours."""
    with committing(session):
        return ReadPublic(marked=notify.mark_read(session=session, user=user,
                                                  notification_id=body.id))


def _choices(user: CurrentUser, session: SessionDep, settings: SettingsDep) -> NoticeChoicesPublic:
    return NoticeChoicesPublic(
        email_configured=settings.smtp_host is not None,
        grade_wait_s=notify.grade_wait_s(session=session, user_id=user.id),
        kinds=[KindChoice(kind=k, about=about,
                          email=notify.email_of(session=session, user_id=user.id, kind=k))
               for k, (about, _) in KINDS.items()])


@router.get("/notifications/settings", response_model=NoticeChoicesPublic)
def choices(user: CurrentUser, session: SessionDep, settings: SettingsDep) -> NoticeChoicesPublic:
    """What you are told by e-mail, per kind, and how long a grading you wait for in the page."""
    return _choices(user, session, settings)


@router.put("/notifications/settings", response_model=NoticeChoicesPublic)
def choose(body: NoticeChoicesIn, user: CurrentUser, session: SessionDep,
           settings: SettingsDep) -> NoticeChoicesPublic:
    """Change what you are told by e-mail (`email`: kind → off, now or digest)."""
    with committing(session):
        notify.choose(session=session, user=user, emails=body.email,
                      grade_wait=body.grade_wait_s)
    return _choices(user, session, settings)


@router.get("/courses/{course}/announcements", response_model=list[AnnouncementPublic])
def of_course(access: CourseDep, session: SessionDep) -> list[AnnouncementPublic]:
    """The course's latest announcements, the newest first."""
    return [AnnouncementPublic.model_validate(a)
            for a in announcements.of_course(session=session, course=access.course)]


@router.post("/courses/{course}/announcements", response_model=AnnouncementPublic,
             status_code=status.HTTP_201_CREATED)
def post(body: AnnouncementIn, access: CourseStaffDep, session: SessionDep) -> AnnouncementPublic:
    """Announce to the course's students (about one assignment with `assignment`): each is
    notified, and e-mailed as they chose."""
    with committing(session):
        a = (assignment_service.get(session=session, course=access.course, slug=body.assignment)
             if body.assignment else None)
        posted = announcements.post(session=session, course=access.course, actor=access.user,
                                    role=access.role, title=body.title, body=body.body,
                                    assignment=a)
        return AnnouncementPublic.model_validate(posted)
