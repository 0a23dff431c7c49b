"""What an LTI launch does: the OIDC login's redirect, the account linked to the LMS identity
(made on its first launch) and enrolled by its LMS role, the gradebook column a student's grade
goes to, and the assignments an instructor places in the LMS (deep linking)."""

from __future__ import annotations

import re
import secrets
import typing as t
from dataclasses import dataclass
from html import escape
from urllib.parse import urlparse

from pylti1p3.deep_link_resource import DeepLinkResource
from pylti1p3.lineitem import LineItem
from pylti1p3.session import SessionService
from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker
from starlette.responses import Response

from runners.protocol import text
from server.models import (
    Assignment,
    Course,
    Enrollment,
    LtiGradePost,
    LtiIdentity,
    LtiLaunchData,
    LtiPlatform,
    User,
    now,
)
from server.services.lti import passback
from server.services.lti.linking import LMS_ONLY_DOMAIN
from server.services.lti.messages import (
    AGS_CLAIM,
    DEEP_LINK_CLAIM,
    REFUSALS,
    ROLES_CLAIM,
    TARGET_CLAIM,
    Launch,
    LaunchRefused,
    Login,
    LtiRequest,
    parts,
)
from server.services.packages import assignments as assignment_service
from server.services.people import courses as course_service
from server.services.records.errors import Invalid, NotFound
from server.settings import ServerSettings

SCORE_SCOPE = "https://purl.imsglobal.org/spec/lti-ags/scope/score"
UNUSABLE_PASSWORD = "!lti"  # no password hash starts so: an LTI account logs in from its LMS


def login(*, session: Session, sessions: sessionmaker[Session], settings: ServerSettings,
          params: dict[str, str], cookies: dict[str, str], secure: bool,
          launch_url: str) -> Response:
    """OIDC login initiation: the redirect to the LMS's authorization endpoint (with state and
    nonce remembered for the launch)."""
    request = LtiRequest(params, cookies, secure)
    conf, cookie_service, storage = parts(request, session, sessions, settings)
    oidc = Login(request, conf, SessionService(request), cookie_service, storage)
    try:
        return oidc.redirect(launch_url)
    except REFUSALS as exc:
        raise LaunchRefused(f"LTI login refused: {exc}") from exc


@dataclass
class Arrival:
    user: User
    course: Course
    role: str
    assignment: Assignment | None
    deep_link: str | None = None  # the launch id of a deep linking request (instructors)


def launch(*, session: Session, sessions: sessionmaker[Session], settings: ServerSettings,
           params: dict[str, str], cookies: dict[str, str], secure: bool) -> Arrival:
    """Validate a resource link launch; the account linked to the LMS identity (made on its
    first launch), enrolled in the platform's course by its LMS role, and, for a student launched
    into an assignment with AGS, the gradebook column their grade goes to."""
    request = LtiRequest(params, cookies, secure)
    conf, cookie_service, storage = parts(request, session, sessions, settings)
    try:
        message = Launch(request, conf, SessionService(request), cookie_service, storage)
        message.validate()
    except REFUSALS as exc:
        raise LaunchRefused(f"LTI launch refused: {exc}") from exc
    data: dict[str, t.Any] = dict(message.get_launch_data())
    platform = session.scalar(select(LtiPlatform).where(
        LtiPlatform.issuer == data["iss"], LtiPlatform.client_id == message.get_client_id()))
    assert platform is not None  # validate() found its registration
    roles = " ".join(data.get(ROLES_CLAIM, []))
    role = ("instructor" if "#Instructor" in roles or "#Administrator" in roles
            else "ta" if "TeachingAssistant" in roles else "student")
    user = _account(session, settings, platform, data)
    enrollment = session.scalar(select(Enrollment).where(
        Enrollment.user_id == user.id, Enrollment.course_id == platform.course_id))
    if enrollment is None:
        alias = course_service.roster_alias(session=session, user=user, course=platform.course)
        enrollment = Enrollment(user_id=user.id, course_id=platform.course_id, role=role,
                                alias=alias)
        session.add(enrollment)
    elif enrollment.role != role and course_service.ROLES.index(role) < \
            course_service.ROLES.index(enrollment.role):
        enrollment.role = role  # the LMS says more than we knew (a student became a TA)
    if message.is_deep_link_launch():
        if enrollment.role != "instructor":
            raise LaunchRefused("only the course's instructors place assignments in the LMS")
        session.flush()
        return Arrival(user=user, course=platform.course, role=enrollment.role, assignment=None,
                       deep_link=message.get_launch_id())
    assignment = _target(session, platform.course, str(data.get(TARGET_CLAIM, "")))
    ags = data.get(AGS_CLAIM) or {}
    if assignment is not None and enrollment.role == "student" and ags.get("lineitem") \
            and SCORE_SCOPE in ags.get("scope", []):
        _grade_target(session, platform, user, assignment, str(data["sub"]), ags)
    session.flush()
    return Arrival(user=user, course=platform.course, role=enrollment.role, assignment=assignment)


def _account(session: Session, settings: ServerSettings, platform: LtiPlatform,
             data: t.Mapping[str, t.Any]) -> User:
    """The account of the launch's LMS identity (issuer, key set, `sub`), made at its first
    launch. What the LMS asserts never reaches an account another course, a roster or a
    password registration could reach, unless the operator trusts this LMS for the email's
    domain (`lti_trusted_email_domains`): any instructor can register an LMS, and an LMS can
    assert any email. Untrusted, the account's email is one no one can register, and the
    asserted one is kept beside the identity, unverified, for the course's staff to read."""
    name = str(data.get("name") or "").strip()[:200]
    claimed = str(data.get("email") or "").strip().lower()
    for value, what in ((name, "the LMS's name for you"), (claimed, "the LMS's email for you")):
        if (why := text.problem(value, what)) is not None:
            raise LaunchRefused(f"LTI launch refused: {why}")
    email = claimed if re.fullmatch(course_service.EMAIL_RE, claimed) and len(claimed) <= 320 \
        else None
    trusted = email is not None and email.rpartition("@")[2] in {
        d.strip().lower() for d in settings.lti_trusted_email_domains.get(platform.key_set_url, [])}
    identity = session.scalar(select(LtiIdentity).where(
        LtiIdentity.issuer == platform.issuer, LtiIdentity.key_set_url == platform.key_set_url,
        LtiIdentity.subject == data["sub"]))
    if identity is not None:
        identity.email = email
        user = session.get(User, identity.user_id)
        assert user is not None
        return user
    user = session.scalar(select(User).where(User.email == email)) if trusted else None
    if user is None:
        own = email if trusted else f"lti-{secrets.token_hex(8)}@{LMS_ONLY_DOMAIN}"
        user = User(email=own, name=name or (email or "LMS user").split("@")[0],
                    password_hash=UNUSABLE_PASSWORD)
        session.add(user)
        session.flush()
    session.add(LtiIdentity(issuer=platform.issuer, key_set_url=platform.key_set_url,
                            subject=str(data["sub"]), user_id=user.id, email=email))
    return user


def _target(session: Session, course: Course, target: str) -> Assignment | None:
    """The assignment a launch's target_link_uri names (…/c/<course>/<slug>), if any."""
    parts = urlparse(target).path.strip("/").split("/")
    if len(parts) >= 3 and parts[-3] == "c" and parts[-2] == course.slug:
        try:
            return assignment_service.get(session=session, course=course, slug=parts[-1])
        except NotFound:
            return None
    return None


def _grade_target(session: Session, platform: LtiPlatform, user: User, assignment: Assignment,
                  subject: str, ags: t.Mapping[str, t.Any]) -> None:
    post = session.scalar(select(LtiGradePost).where(
        LtiGradePost.platform_id == platform.id, LtiGradePost.user_id == user.id,
        LtiGradePost.assignment_id == assignment.id))
    if post is None:
        post = LtiGradePost(platform_id=platform.id, user_id=user.id, assignment_id=assignment.id,
                            subject=subject, lineitem_url=str(ags["lineitem"]),
                            scopes=list(ags["scope"]), state="idle", attempts=0)
        session.add(post)
        session.flush()
        passback.grade_changed(session=session, assignment_id=assignment.id, user_id=user.id)
    else:
        post.lineitem_url, post.scopes, post.subject = str(ags["lineitem"]), list(ags["scope"]), \
            subject


def deep_link_response(*, session: Session, sessions: sessionmaker[Session],
                       settings: ServerSettings, launch_id: str, cookies: dict[str, str],
                       secure: bool, user: User, slugs: list[str], base: str) -> str:
    """The page that hands the chosen assignments back to the LMS (a signed
    LtiDeepLinkingResponse, posted by the browser): each a resource link to its page, with a
    gradebook column for its points."""

    request = LtiRequest({}, cookies, secure)
    conf, cookie_service, storage = parts(request, session, sessions, settings)
    try:
        message = Launch.from_cache(launch_id, request, conf, SessionService(request),
                                     cookie_service, storage)
    except REFUSALS as exc:
        raise LaunchRefused(f"this placement expired or is not yours: {exc}") from exc
    data: dict[str, t.Any] = dict(message.get_launch_data())
    platform = session.scalar(select(LtiPlatform).where(
        LtiPlatform.issuer == data["iss"], LtiPlatform.client_id == message.get_client_id()))
    identity = session.scalar(select(LtiIdentity).where(
        LtiIdentity.user_id == user.id, LtiIdentity.subject == data["sub"]))
    if platform is None or identity is None or course_service.role(
            session=session, user=user, course=platform.course) != "instructor":
        raise LaunchRefused("this placement belongs to another launch")
    if not slugs:
        raise Invalid("choose at least one assignment")
    items = []
    for slug in slugs:
        a = assignment_service.get(session=session, course=platform.course, slug=slug)
        scoring = assignment_service.manifest_of(a).scoring
        column = (LineItem().set_label(a.title).set_resource_id(a.slug)
                  .set_score_maximum(scoring.test_points + scoring.performance_points))
        items.append(DeepLinkResource().set_url(f"{base}/c/{platform.course.slug}/{a.slug}")
                     .set_title(a.title).set_lineitem(column))
    link = message.get_deep_link()
    token = link.get_response_jwt(items)
    return_url = str(data[DEEP_LINK_CLAIM]["deep_link_return_url"])
    if urlparse(return_url).scheme not in ("https", "http"):
        raise LaunchRefused("the LMS's deep linking return URL is not http(s)")
    return (f'<form id="lms" method="post" action="{escape(return_url)}">'
            f'<input type="hidden" name="JWT" value="{escape(token)}"></form>'
            '<script>document.getElementById("lms").submit()</script>')


def purge(*, session: Session) -> int:
    """Forget expired launch data (states, nonces, launches)."""
    gone = session.execute(delete(LtiLaunchData).where(LtiLaunchData.expires_at < now()))
    return int(gone.rowcount)  # type: ignore[attr-defined]
