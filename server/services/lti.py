"""LTI 1.3 (Advantage) with pylti1p3: an LMS launches students into a course, and their grades
go back to its gradebook (Assignment and Grade Services).

pylti1p3 validates the messages (state, the id_token's signature against the platform's JWKS,
its expiry, nonce, registration and deployment); this module gives it what a framework adapter
gives it elsewhere: the request's parameters and cookies, a tool configuration read from the
database, and launch data kept in the database (the launch is a cross-site POST, on which the
browser withholds our session cookie). A nonce is good for one launch: its row is deleted by the
launch that uses it, so a replayed id_token is refused.

Grades are posted by the reaper, never in the request that changed them: a post the LMS refuses
or cannot take stays pending, with its error, and is retried with backoff until it is taken.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
import typing as t
from dataclasses import dataclass, field
from datetime import timedelta
from html import escape
from urllib.parse import urlparse

import jwt
import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from pylti1p3.assignments_grades import AssignmentsGradesService
from pylti1p3.cookie import CookieService
from pylti1p3.deep_link_resource import DeepLinkResource
from pylti1p3.deployment import Deployment
from pylti1p3.exception import LtiException, LtiServiceException, OIDCException
from pylti1p3.grade import Grade
from pylti1p3.launch_data_storage.base import LaunchDataStorage
from pylti1p3.lineitem import LineItem
from pylti1p3.message_launch import MessageLaunch
from pylti1p3.oidc_login import OIDCLogin
from pylti1p3.redirect import Redirect
from pylti1p3.registration import Registration
from pylti1p3.request import Request
from pylti1p3.service_connector import ServiceConnector
from pylti1p3.session import SessionService
from pylti1p3.tool_config.abstract import ToolConfAbstract
from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker
from starlette.responses import HTMLResponse, RedirectResponse, Response

from server.models import (
    Assignment,
    AuditLog,
    BoardEntry,
    Course,
    Enrollment,
    GradeReportRow,
    LtiGradePost,
    LtiIdentity,
    LtiLaunchData,
    LtiPlatform,
    Submission,
    User,
    aware,
    now,
)
from server.services import assignments as assignment_service
from server.services import courses as course_service
from server.services import outbound
from server.services.errors import Conflict, Forbidden, Invalid, NotFound
from server.settings import ServerSettings, get_settings

AGS_CLAIM = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"
ROLES_CLAIM = "https://purl.imsglobal.org/spec/lti/claim/roles"
TARGET_CLAIM = "https://purl.imsglobal.org/spec/lti/claim/target_link_uri"
DEEP_LINK_CLAIM = "https://purl.imsglobal.org/spec/lti-dl/claim/deep_linking_settings"
SCORE_SCOPE = "https://purl.imsglobal.org/spec/lti-ags/scope/score"
LAUNCH_LIFETIME_S = 600
RETRY_MAX_S = 3600
KEY_SET_TTL_S = 300
"""A platform's key set is fetched again after this long (an LMS rotates its keys in days)."""
KEY_SET_REFETCH_S = 10
"""A token signed with a key the cached set lacks fetches the set again, at most this often (a
stream of tokens with made-up key ids does not turn into a stream of fetches)."""
UNUSABLE_PASSWORD = "!lti"  # no password hash starts so: an LTI account logs in from its LMS

log = logging.getLogger("paragrade.lti")


class LaunchRefused(Forbidden):
    """An LTI message that did not validate (the reason is pylti1p3's, or ours)."""


def policy(settings: ServerSettings, platform: LtiPlatform) -> outbound.Policy:
    """What requests made for this platform may reach: its own setting lets a test LMS on a
    private address in; outside development, only where the operator allows that at all."""
    development = settings.environment == "development"
    return outbound.Policy(
        https_only=not development,
        allow_private=platform.allow_private_network and (
            development or settings.outbound_private_networks),
        budget_s=settings.outbound_budget_s, max_bytes=settings.outbound_max_bytes)


class _Http(requests.Session):
    """What pylti1p3 takes for its token and score requests, sent through the outbound client
    (its checks, budget and cap) instead of requests' own connections."""

    def __init__(self, policy: outbound.Policy) -> None:
        super().__init__()
        self.policy = policy

    def request(self, method: str | bytes, url: str | bytes, *args: t.Any,
                **kwargs: t.Any) -> requests.Response:
        sent = self.prepare_request(requests.Request(
            method=str(method), url=str(url), params=kwargs.get("params"),
            data=kwargs.get("data"), json=kwargs.get("json"), headers=kwargs.get("headers")))
        body = sent.body.encode() if isinstance(sent.body, str) else sent.body
        if body is not None and not isinstance(body, bytes):
            raise ValueError("a streamed body is not sent to an LMS")
        answer = outbound.request(str(sent.method), str(sent.url), policy=self.policy,
                                  what="the LMS's token or score endpoint",
                                  headers={str(k): str(v) for k, v in sent.headers.items()},
                                  content=body)
        response = requests.Response()
        response.status_code, response.url, response._content = (answer.status, str(sent.url),
                                                                  answer.body)
        response.headers.update(answer.headers)
        response.encoding = "utf-8"
        response.request = sent
        return response


_key_sets: dict[tuple[int, str, str], tuple[float, t.Any]] = {}
_key_sets_lock = threading.Lock()


def _key_set(platform: _Registration) -> t.Any:
    """The platform's key set, fetched through the outbound client and kept for a while: one
    fetch per platform, not one per launch."""
    key = _key_set_key(platform)
    with _key_sets_lock:
        cached = _key_sets.get(key)
    if cached is not None and cached[0] > time.monotonic():
        return cached[1]
    try:
        answer = outbound.request("GET", key[1], policy=platform.policy,
                                  what="the LMS's key set")
        if answer.status != 200:
            raise outbound.OutboundFailed(f"the LMS's key set: answered HTTP {answer.status}")
        keys = json.loads(answer.body)
        if not isinstance(keys, dict) or not isinstance(keys.get("keys"), list):
            raise ValueError("not a JSON key set")
    except outbound.OutboundFailed as exc:
        raise LaunchRefused(f"LTI launch refused: {exc.public} (the server's log has the "
                            "details)") from None
    except (ValueError, RecursionError) as exc:
        log.warning("key set of %s at %s is not a key set: %s", platform.get_issuer(), key[1],
                    exc)
        raise LaunchRefused("LTI launch refused: the LMS's key set is not a JSON key set (the "
                            "server's log has the details)") from None
    with _key_sets_lock:
        _key_sets[key] = (time.monotonic() + KEY_SET_TTL_S, keys)
    return keys


def _key_set_key(platform: _Registration) -> tuple[int, str, str]:
    return (platform.platform_id, platform.get_key_set_url() or "", platform.kid)


def _forget_key_set(platform: _Registration) -> bool:
    """Drop a cached key set fetched more than a few seconds ago (True), so that the next
    launch fetches it again; a fresh one stays (an unknown key is then the token's fault)."""
    with _key_sets_lock:
        cached = _key_sets.get(_key_set_key(platform))
        if cached is None or cached[0] - KEY_SET_TTL_S > time.monotonic() - KEY_SET_REFETCH_S:
            return False
        del _key_sets[_key_set_key(platform)]
        return True


# --- platforms (registrations) ------------------------------------------------------------------
def register(*, session: Session, actor: User, course: Course, role: str | None, issuer: str,
             client_id: str, auth_login_url: str, auth_token_url: str, key_set_url: str,
             deployment_ids: list[str], allow_private_network: bool = False,
             development: bool = False) -> LtiPlatform:
    """Register an LMS for the course, with a fresh key pair for the tool; audit-logged."""
    if role != "instructor":
        raise Forbidden("only the course's instructors register an LMS")
    schemes = ("https", "http") if development else ("https",)
    for name, url in (("auth_login_url", auth_login_url), ("auth_token_url", auth_token_url),
                      ("key_set_url", key_set_url)):
        if urlparse(url).scheme not in schemes or not urlparse(url).netloc:
            raise Invalid(f"{name}: not an {' or '.join(schemes)} URL")
    if session.scalar(select(LtiPlatform.id).where(LtiPlatform.issuer == issuer,
                                                   LtiPlatform.client_id == client_id)):
        raise Conflict(f"{issuer} with client id {client_id!r} is registered already")
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    platform = LtiPlatform(course_id=course.id, issuer=issuer, client_id=client_id,
                           auth_login_url=auth_login_url, auth_token_url=auth_token_url,
                           key_set_url=key_set_url, deployment_ids=deployment_ids,
                           allow_private_network=allow_private_network,
                           tool_private_key=pem, tool_kid=secrets.token_hex(8))
    session.add(platform)
    session.flush()
    session.add(AuditLog(actor_id=actor.id, action="lti.register", target=course.slug,
                         detail={"issuer": issuer, "client_id": client_id,
                                 "allow_private_network": allow_private_network}))
    return platform


def platforms(*, session: Session, course: Course) -> list[LtiPlatform]:
    return list(session.scalars(select(LtiPlatform).where(LtiPlatform.course_id == course.id)
                                .order_by(LtiPlatform.id)))


def public_pem(platform: LtiPlatform) -> str:
    key = serialization.load_pem_private_key(platform.tool_private_key.encode(), password=None)
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def jwks(*, session: Session) -> dict[str, list[dict[str, t.Any]]]:
    """The tool's public keys, one per registered platform (what an LMS verifies us with)."""
    return {"keys": [{**Registration.get_jwk(public_pem(p)), "kid": p.tool_kid}
                     for p in session.scalars(select(LtiPlatform).order_by(LtiPlatform.id))]}


class _Registration(Registration):
    def __init__(self, platform: LtiPlatform, policy: outbound.Policy) -> None:
        super().__init__()
        self.kid, self.platform_id, self.policy = platform.tool_kid, platform.id, policy
        (self.set_issuer(platform.issuer).set_client_id(platform.client_id)
         .set_auth_login_url(platform.auth_login_url).set_auth_token_url(platform.auth_token_url)
         .set_key_set_url(platform.key_set_url).set_tool_private_key(platform.tool_private_key)
         .set_tool_public_key(public_pem(platform)))

    def get_kid(self) -> str | None:
        return self.kid


class _ToolConf(ToolConfAbstract["_Request"]):
    """Registrations from the database; every issuer may have several client ids."""

    def __init__(self, session: Session, settings: ServerSettings) -> None:
        self.session, self.settings = session, settings

    def check_iss_has_one_client(self, iss: str) -> bool:
        return False

    def check_iss_has_many_clients(self, iss: str) -> bool:
        return True

    def _platform(self, iss: str, client_id: str | None) -> LtiPlatform | None:
        return self.session.scalar(select(LtiPlatform).where(LtiPlatform.issuer == iss,
                                                             LtiPlatform.client_id == client_id))

    def find_registration_by_issuer(self, iss: str, *args: t.Any, **kwargs: t.Any
                                    ) -> Registration:
        raise LtiException("this tool needs the client_id with every message")

    def find_registration_by_params(self, iss: str, client_id: str, *args: t.Any,
                                    **kwargs: t.Any) -> Registration:
        platform = self._platform(iss, client_id)
        if platform is None:
            return None  # type: ignore[return-value]
        return _Registration(platform, policy(self.settings, platform))

    def find_deployment(self, iss: str, deployment_id: str) -> Deployment | None:
        return None

    def find_deployment_by_params(self, iss: str, deployment_id: str, client_id: str,
                                  *args: t.Any, **kwargs: t.Any) -> Deployment | None:
        platform = self._platform(iss, client_id)
        if platform is None or deployment_id not in platform.deployment_ids:
            return None
        return Deployment().set_deployment_id(deployment_id)


# --- pylti1p3's framework adapter, for Starlette ------------------------------------------------
@dataclass
class _Request(Request):
    params: dict[str, str]
    cookies: dict[str, str]
    secure: bool
    store: dict[str, t.Any] = field(default_factory=dict)

    @property
    def session(self) -> dict[str, t.Any]:
        return self.store

    def is_secure(self) -> bool:
        return self.secure

    def get_param(self, key: str) -> str:
        return self.params.get(key)  # type: ignore[return-value]

    def get_cookie(self, key: str) -> str | None:
        return self.cookies.get(key)


class _Cookies(CookieService):
    def __init__(self, request: _Request) -> None:
        self.request, self.pending = request, {}  # type: ignore[var-annotated]

    def get_cookie(self, name: str) -> str | None:
        return self.request.get_cookie(f"{self._cookie_prefix}-{name}")

    def set_cookie(self, name: str, value: str | int, exp: int | None = 3600) -> None:
        self.pending[f"{self._cookie_prefix}-{name}"] = (str(value), exp)

    def apply(self, response: Response) -> Response:
        for key, (value, exp) in self.pending.items():
            # The launch comes back cross-site: over https the cookie must be SameSite=None.
            response.set_cookie(key, value, max_age=exp, path="/lti", httponly=True,
                                secure=self.request.secure,
                                samesite="none" if self.request.secure else "lax")
        return response


class _Storage(LaunchDataStorage[t.Any]):
    """Launch data in the database, each value expiring, its key bound to the browser (the
    session-id cookie pylti1p3 sets at login); a nonce is taken once."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        super().__init__()
        self.sessions = sessions

    def can_set_keys_expiration(self) -> bool:
        return True

    def get_value(self, key: str) -> t.Any:
        key = self._prepare_key(key)
        with self.sessions() as s:
            row = s.get(LtiLaunchData, key)
            return None if row is None or aware(row.expires_at) < now() else row.value

    def set_value(self, key: str, value: t.Any, exp: int | None = None) -> None:
        key = self._prepare_key(key)
        with self.sessions() as s, s.begin():
            s.merge(LtiLaunchData(key=key, value=json.loads(json.dumps(value, default=str)),
                                  expires_at=now() + timedelta(seconds=exp or LAUNCH_LIFETIME_S)))

    def check_value(self, key: str) -> bool:
        key = self._prepare_key(key)
        with self.sessions() as s, s.begin():
            if "-nonce-" in key:  # one launch per nonce: whoever deletes the row used it
                gone = s.execute(delete(LtiLaunchData).where(LtiLaunchData.key == key,
                                                             LtiLaunchData.expires_at > now()))
                return bool(gone.rowcount)  # type: ignore[attr-defined]
            row = s.get(LtiLaunchData, key)
            return row is not None and aware(row.expires_at) >= now()


class _Redirect(Redirect[Response]):
    def __init__(self, location: str, cookies: _Cookies) -> None:
        self.location, self.cookies = location, cookies

    def do_redirect(self) -> Response:
        return self.cookies.apply(RedirectResponse(self.location, status_code=302))

    def do_js_redirect(self) -> Response:
        return self.do_redirect()

    def set_redirect_url(self, location: str) -> None:
        self.location = location

    def get_redirect_url(self) -> str:
        return self.location


class _Login(OIDCLogin[_Request, _ToolConf, t.Any, _Cookies, Response]):
    def get_redirect(self, url: str) -> _Redirect:
        return _Redirect(url, self._cookie_service)

    def get_response(self, html: str) -> Response:
        return HTMLResponse(html)


# Claims this tool reads, and the JSON type each must have: pylti1p3 reads them without asking,
# and an id_token is anyone's to write until its signature is checked.
_STR, _INT, _LIST, _DICT = (str,), (int,), (list,), (dict,)
_CLAIMS: dict[str, tuple[type, ...]] = {
    "iss": _STR, "sub": _STR, "nonce": _STR, "exp": _INT, "iat": _INT, "nbf": _INT,
    "azp": _STR, "email": _STR, "name": _STR, "given_name": _STR, "family_name": _STR,
    ROLES_CLAIM: _LIST, TARGET_CLAIM: _STR, AGS_CLAIM: _DICT, DEEP_LINK_CLAIM: _DICT,
    "https://purl.imsglobal.org/spec/lti/claim/deployment_id": _STR,
    "https://purl.imsglobal.org/spec/lti/claim/message_type": _STR,
    "https://purl.imsglobal.org/spec/lti/claim/version": _STR,
    "https://purl.imsglobal.org/spec/lti/claim/resource_link": _DICT,
    "https://purl.imsglobal.org/spec/lti/claim/context": _DICT,
    "https://purl.imsglobal.org/spec/lti-nrps/claim/namesroleservice": _DICT,
}
_REQUIRED = ("iss", "aud", "sub", "nonce", "exp")


def token_problem(header: t.Any, body: t.Any) -> str | None:
    """Why an id_token's decoded header and claims cannot be used as they are, or None."""
    if not isinstance(header, dict) or not isinstance(body, dict):
        return "the id_token's header and claims must be JSON objects"
    if not isinstance(header.get("alg"), str) or not isinstance(header.get("kid", ""), str):
        return "the id_token's header needs a string alg (and kid)"
    for name in _REQUIRED:
        if name not in body:
            return f"the id_token has no {name!r} claim"
    for name, types in _CLAIMS.items():
        value = body.get(name)
        if value is not None and (not isinstance(value, types) or isinstance(value, bool)):
            return f"the id_token's {name!r} claim has the wrong type"
    aud = body["aud"]
    if isinstance(aud, list):
        if not aud or not all(isinstance(a, str) for a in aud):
            return "the id_token's 'aud' claim must be a string or a list of strings"
        if len(aud) > 1 and body.get("azp") != aud[0]:
            return "an id_token for several audiences needs 'azp', naming this tool"
    elif not isinstance(aud, str):
        return "the id_token's 'aud' claim must be a string or a list of strings"
    if not all(isinstance(r, str) for r in body.get(ROLES_CLAIM) or []):
        return "the id_token's roles must be strings"
    ags = body.get(AGS_CLAIM) or {}
    if not isinstance(ags.get("lineitem", ""), str) or not isinstance(
            ags.get("lineitems", ""), str) or not all(
            isinstance(s, str) for s in ags.get("scope") or []) or not isinstance(
            ags.get("scope", []), list):
        return "the id_token's grade service claim has the wrong shape"
    link = body.get(DEEP_LINK_CLAIM)
    if link is not None and not isinstance(link.get("deep_link_return_url"), str):
        return "the id_token's deep linking settings need a return URL"
    return None


class _Launch(MessageLaunch[_Request, _ToolConf, t.Any, _Cookies]):
    def _get_request_param(self, key: str) -> str:
        return self._request.get_param(key)

    def validate_jwt_format(self) -> _Launch:
        if not isinstance(self._get_id_token(), str):
            raise LtiException("Missing id_token")
        super().validate_jwt_format()
        if (problem := token_problem(self._jwt.get("header"), self._jwt.get("body"))) is not None:
            raise LtiException(problem)
        return self

    def fetch_public_key(self, key_set_url: str) -> t.Any:
        assert isinstance(self._registration, _Registration)
        return _key_set(self._registration)

    def get_public_key(self) -> tuple[str, str]:
        try:
            return super().get_public_key()
        except LtiException:
            # A key the cached set lacks: the LMS may have rotated its keys. Fetch once more.
            assert isinstance(self._registration, _Registration)
            if not _forget_key_set(self._registration):
                raise
            self._registration.set_key_set(None)
            return super().get_public_key()


def _parts(request: _Request, session: Session, sessions: sessionmaker[Session],
           settings: ServerSettings) -> tuple[_ToolConf, _Cookies, _Storage]:
    storage = _Storage(sessions)
    storage.set_request(request)
    return _ToolConf(session, settings), _Cookies(request), storage


# What pylti1p3 raises on a message it cannot use: its own exceptions, and, for claims of
# unexpected shapes it reads without checking, Python's.
_REFUSALS = (LtiException, OIDCException, jwt.PyJWTError, KeyError, ValueError, TypeError,
             AttributeError, IndexError)


def login(*, session: Session, sessions: sessionmaker[Session], settings: ServerSettings,
          params: dict[str, str], cookies: dict[str, str], secure: bool,
          launch_url: str) -> Response:
    """OIDC login initiation: the redirect to the LMS's authorization endpoint (with state and
    nonce remembered for the launch)."""
    request = _Request(params, cookies, secure)
    conf, cookie_service, storage = _parts(request, session, sessions, settings)
    oidc = _Login(request, conf, SessionService(request), cookie_service, storage)
    try:
        return oidc.redirect(launch_url)
    except _REFUSALS as exc:
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
    request = _Request(params, cookies, secure)
    conf, cookie_service, storage = _parts(request, session, sessions, settings)
    try:
        message = _Launch(request, conf, SessionService(request), cookie_service, storage)
        message.validate()
    except _REFUSALS as exc:
        raise LaunchRefused(f"LTI launch refused: {exc}") from exc
    data: dict[str, t.Any] = dict(message.get_launch_data())
    platform = session.scalar(select(LtiPlatform).where(
        LtiPlatform.issuer == data["iss"], LtiPlatform.client_id == message.get_client_id()))
    assert platform is not None  # validate() found its registration
    roles = " ".join(data.get(ROLES_CLAIM, []))
    role = ("instructor" if "#Instructor" in roles or "#Administrator" in roles
            else "ta" if "TeachingAssistant" in roles else "student")
    user = _account(session, platform, data)
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


def _account(session: Session, platform: LtiPlatform, data: t.Mapping[str, t.Any]) -> User:
    identity = session.scalar(select(LtiIdentity).where(
        LtiIdentity.issuer == platform.issuer, LtiIdentity.key_set_url == platform.key_set_url,
        LtiIdentity.subject == data["sub"]))
    if identity is not None:
        user = session.get(User, identity.user_id)
        assert user is not None
        return user
    # Never an existing account by its email: any instructor can register an LMS, and an LMS
    # can claim any email. A taken (or missing) email gets an address no one can register.
    email = str(data.get("email") or "").strip().lower()[:320]
    if not email or session.scalar(select(User.id).where(User.email == email)) is not None:
        email = f"lti-{secrets.token_hex(8)}@lti.invalid"
    user = User(email=email, name=str(data.get("name") or email.split("@")[0])[:200],
                password_hash=UNUSABLE_PASSWORD)
    session.add(user)
    session.flush()
    session.add(LtiIdentity(issuer=platform.issuer, key_set_url=platform.key_set_url,
                            subject=str(data["sub"]), user_id=user.id))
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
        grade_changed(session=session, assignment_id=assignment.id, user_id=user.id)
    else:
        post.lineitem_url, post.scopes, post.subject = str(ags["lineitem"]), list(ags["scope"]), \
            subject


def deep_link_response(*, session: Session, sessions: sessionmaker[Session],
                       settings: ServerSettings, launch_id: str, cookies: dict[str, str],
                       secure: bool, user: User, slugs: list[str], base: str) -> str:
    """The page that hands the chosen assignments back to the LMS (a signed
    LtiDeepLinkingResponse, posted by the browser): each a resource link to its page, with a
    gradebook column for its points."""

    request = _Request({}, cookies, secure)
    conf, cookie_service, storage = _parts(request, session, sessions, settings)
    try:
        message = _Launch.from_cache(launch_id, request, conf, SessionService(request),
                                     cookie_service, storage)
    except _REFUSALS as exc:
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


# --- grade passback -----------------------------------------------------------------------------
def current_score(session: Session, assignment_id: int, user_id: int) -> float | None:
    """The score the leaderboard uses (its entry's, after late policy and reviews), else the
    student's best graded score; None before anything is graded."""
    board = session.scalar(select(GradeReportRow.score).join(
        BoardEntry, BoardEntry.submission_id == GradeReportRow.submission_id).where(
        BoardEntry.assignment_id == assignment_id, BoardEntry.user_id == user_id))
    if board is not None:
        return float(board)
    best = session.scalar(select(GradeReportRow.score).join(
        Submission, Submission.id == GradeReportRow.submission_id).where(
        Submission.assignment_id == assignment_id, Submission.user_id == user_id)
        .order_by(GradeReportRow.score.desc()).limit(1))
    return None if best is None else float(best)


def grade_changed(*, session: Session, assignment_id: int, user_id: int | None = None) -> None:
    """A grade of this assignment (one student's, or everyone's) may have changed: what is owed
    to each LMS gradebook becomes pending (posted by the reaper, in its own transaction)."""
    q = select(LtiGradePost).where(LtiGradePost.assignment_id == assignment_id)
    if user_id is not None:
        q = q.where(LtiGradePost.user_id == user_id)
    for post in session.scalars(q):
        score = current_score(session, assignment_id, post.user_id)
        if score is None or (score == post.score and post.state == "pending"):
            continue  # nothing graded yet, or this very score already waits to be posted
        post.score, post.state, post.attempts, post.next_at = score, "pending", 0, now()
        post.max_score = _max_score(session, assignment_id)


def _max_score(session: Session, assignment_id: int) -> float:
    a = session.get(Assignment, assignment_id)
    if a is None:
        return 100.0
    scoring = assignment_service.manifest_of(a).scoring
    return float(scoring.test_points + scoring.performance_points)


def send_pending(*, sessions: sessionmaker[Session], settings: ServerSettings | None = None
                 ) -> tuple[int, int]:
    """Post every pending grade that is due; (sent, failed). A failure keeps the grade pending
    with a fixed account of it (the LMS's answer goes to the log, never to the page: it may be
    anything the registered address serves) and the time of the next try (backoff up to an
    hour)."""
    settings = settings or get_settings()
    sent = failed = 0
    with sessions() as s:
        due = s.scalars(select(LtiGradePost.id).where(LtiGradePost.state == "pending",
                                                      LtiGradePost.next_at <= now())).all()
    for post_id in due:
        with sessions() as s, s.begin():
            post = s.get(LtiGradePost, post_id, with_for_update=True)
            if post is None or post.state != "pending" or post.score is None:
                continue
            try:
                _post(post, _Http(policy(settings, post.platform)), settings)
            except (outbound.OutboundFailed, LtiException, requests.RequestException, KeyError,
                    ValueError, TypeError, RecursionError) as exc:
                log.warning("grade post %d to %s failed: %s: %s", post.id, post.lineitem_url,
                            type(exc).__name__, exc)
                post.attempts += 1
                post.last_error = _shown(exc)
                post.next_at = now() + timedelta(seconds=min(RETRY_MAX_S, 15 * 2 ** post.attempts))
                failed += 1
                continue
            post.state, post.sent_at, post.last_error = "sent", now(), None
            sent += 1
    return sent, failed


def _shown(exc: Exception) -> str:
    """What the course's staff see of a failed post: which step failed and the LMS's status,
    never its answer."""
    if isinstance(exc, outbound.OutboundFailed):
        return exc.public
    if isinstance(exc, LtiServiceException):
        return f"the LMS answered HTTP {exc.response.status_code} (the server's log has more)"
    return f"the LMS's answer could not be used ({type(exc).__name__}; the server's log has more)"


def _post(post: LtiGradePost, http: requests.Session, settings: ServerSettings) -> None:
    connector = ServiceConnector(_Registration(post.platform, policy(settings, post.platform)),
                                 http)
    service = AssignmentsGradesService(connector, {"scope": post.scopes,  # type: ignore[typeddict-item]
                                                   "lineitem": post.lineitem_url})
    assert post.score is not None
    grade = (Grade().set_score_given(post.score).set_score_maximum(post.max_score)
             .set_timestamp(now().isoformat()).set_activity_progress("Completed")
             .set_grading_progress("FullyGraded").set_user_id(post.subject))
    service.put_grade(grade)


def purge(*, session: Session) -> int:
    """Forget expired launch data (states, nonces, launches)."""
    gone = session.execute(delete(LtiLaunchData).where(LtiLaunchData.expires_at < now()))
    return int(gone.rowcount)  # type: ignore[attr-defined]


def posts(*, session: Session, course: Course) -> list[LtiGradePost]:
    return list(session.scalars(select(LtiGradePost).join(
        LtiPlatform, LtiPlatform.id == LtiGradePost.platform_id).where(
        LtiPlatform.course_id == course.id).order_by(LtiGradePost.id)))
