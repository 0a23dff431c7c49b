"""An LMS identity linked to an account its owner proves is theirs.

An LMS's launch makes an account of its own for an identity the operator does not trust for its
email's domain (server/services/lti/launch.py, `_account`): a student who already has a password
account then has two. They link the LMS identity to the older one by logging in to it from the
launched session: the password is the proof that no LMS can give. Linking moves the identity
(and its enrolments and gradebook columns) to that account and removes the LMS-made one, so the
LMS's later launches sign in to the older account. A linked LMS can sign in as that person from
then on: that is what linking means, and the page says so before the password is asked.
"""

from __future__ import annotations

from sqlalchemy import delete, exists, select, update
from sqlalchemy.orm import Session

from server.models import (
    AuditLog,
    Course,
    Enrollment,
    Extension,
    LtiGradePost,
    LtiIdentity,
    LtiPlatform,
    Submission,
    User,
)
from server.services.people import courses as course_service
from server.services.people import users as user_service
from server.services.records.errors import Conflict, Forbidden

LMS_ONLY_DOMAIN = "lti.invalid"
"""The domain of the emails an LMS's own accounts get (no one can register or be invited there)."""


def lms_only(user: User) -> bool:
    """Whether an LMS made this account, with an email of its own (linkable to another)."""
    return user.email.endswith(f"@{LMS_ONLY_DOMAIN}")


def made_by(*, session: Session, user: User) -> list[tuple[str, str]]:
    """The LMSs (issuer) and their courses (title) behind an LMS-made account: the link page
    names them, so that a person whose browser an LMS they do not know launched (any site can
    post a launch) does not give that LMS their account."""
    rows = session.execute(
        select(LtiIdentity.issuer, Course.title).join(
            LtiPlatform, (LtiPlatform.issuer == LtiIdentity.issuer)
            & (LtiPlatform.key_set_url == LtiIdentity.key_set_url))
        .join(Course, Course.id == LtiPlatform.course_id)
        .where(LtiIdentity.user_id == user.id)).all()
    return sorted({(str(issuer), str(title)) for issuer, title in rows})


def link(*, session: Session, lms_user: User, email: str, password: str, address: str,
         limits: user_service.LoginLimits) -> User:
    """Move `lms_user`'s LMS identities to the account these credentials open (the login's own
    check and throttle) and remove `lms_user`; the account they now reach.

    Refused (nothing changes): a signed-in account an LMS did not make (it has nothing to link),
    wrong credentials, another LMS-made account, and an LMS-made account that has submitted
    already (its submissions would be left behind: the course's staff decide)."""
    if not lms_only(lms_user):
        raise Forbidden("this account was not made by an LMS: there is nothing to link")
    _refuse_if_submitted(session, lms_user)  # before a password is tried
    owner = user_service.authenticate(session=session, email=email, password=password,
                                      address=address, limits=limits)
    if lms_only(owner) or owner.id == lms_user.id:
        raise Forbidden("that account was made by an LMS too: log in with your own account")
    # Again, held until the account is gone (authenticate committed: nothing is held before):
    # an upload in flight from it finishes first and is seen here, or waits and finds it gone.
    user_service.hold(session=session, user_id=lms_user.id)
    _refuse_if_submitted(session, lms_user)
    _enrolments(session, lms_user, owner)
    for post in session.scalars(select(LtiGradePost).where(LtiGradePost.user_id == lms_user.id)):
        twin = session.scalar(select(LtiGradePost.id).where(
            LtiGradePost.user_id == owner.id, LtiGradePost.platform_id == post.platform_id,
            LtiGradePost.assignment_id == post.assignment_id))
        if twin is None:
            post.user_id = owner.id
    for ext in session.scalars(select(Extension).where(Extension.user_id == lms_user.id)):
        if session.scalar(select(Extension.id).where(Extension.user_id == owner.id,
                                                      Extension.assignment_id == ext.assignment_id)) is None:
            ext.user_id = owner.id
    session.flush()
    session.execute(update(LtiIdentity).where(LtiIdentity.user_id == lms_user.id)
                    .values(user_id=owner.id))
    session.add(AuditLog(actor_id=owner.id, action="lti.link", target=owner.email,
                         detail={"lms_account": lms_user.email}))
    session.execute(delete(User).where(User.id == lms_user.id))  # the rest goes with it (CASCADE)
    session.flush()
    return owner


def _refuse_if_submitted(session: Session, lms_user: User) -> None:
    if session.scalar(select(exists().where(Submission.user_id == lms_user.id))):
        raise Conflict("you have submitted from the account your LMS made: linking would leave "
                       "those submissions behind, so ask the course's staff to move them")


def _enrolments(session: Session, lms_user: User, owner: User) -> None:
    """The LMS-made account's enrolments become the owner's; where the owner is enrolled
    already, the higher of the two roles stays (as a launch raises a role, never lowers it)."""
    for e in session.scalars(select(Enrollment).where(Enrollment.user_id == lms_user.id)):
        mine = session.scalar(select(Enrollment).where(Enrollment.user_id == owner.id,
                                                       Enrollment.course_id == e.course_id))
        if mine is None:
            e.user_id = owner.id
            continue
        if course_service.ROLES.index(e.role) < course_service.ROLES.index(mine.role):
            mine.role = e.role
        session.delete(e)
