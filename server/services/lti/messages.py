"""LTI messages as pylti1p3 validates them here: what a framework adapter gives it elsewhere (the
request's parameters and cookies, the tool configuration read from the database, launch data
kept in the database), the claims' expected types, and each platform's key set, fetched through
the outbound client and cached."""

from __future__ import annotations

import json
import logging
import threading
import time
import typing as t
from dataclasses import dataclass, field
from datetime import timedelta

import jwt
from pylti1p3.cookie import CookieService
from pylti1p3.deployment import Deployment
from pylti1p3.exception import LtiException, OIDCException
from pylti1p3.launch_data_storage.base import LaunchDataStorage
from pylti1p3.message_launch import MessageLaunch
from pylti1p3.oidc_login import OIDCLogin
from pylti1p3.redirect import Redirect
from pylti1p3.registration import Registration
from pylti1p3.request import Request
from pylti1p3.tool_config.abstract import ToolConfAbstract
from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker
from starlette.responses import HTMLResponse, RedirectResponse, Response

from runners.protocol import text
from server.models import LtiLaunchData, LtiPlatform, aware, now
from server.services.lti.platforms import PlatformRegistration, policy
from server.services.records import outbound
from server.services.records.errors import Forbidden
from server.settings import ServerSettings

AGS_CLAIM = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"
ROLES_CLAIM = "https://purl.imsglobal.org/spec/lti/claim/roles"
TARGET_CLAIM = "https://purl.imsglobal.org/spec/lti/claim/target_link_uri"
DEEP_LINK_CLAIM = "https://purl.imsglobal.org/spec/lti-dl/claim/deep_linking_settings"
LAUNCH_LIFETIME_S = 600
KEY_SET_TTL_S = 300
"""A platform's key set is fetched again after this long (an LMS rotates its keys in days)."""
KEY_SET_REFETCH_S = 10
"""A token signed with a key the cached set lacks fetches the set again, at most this often (a
stream of tokens with made-up key ids does not turn into a stream of fetches)."""

log = logging.getLogger("paragrade.lti")


class LaunchRefused(Forbidden):
    """An LTI message that did not validate (the reason is pylti1p3's, or ours)."""


KEY_SET_FAILURE_S = 5
"""A key set that could not be fetched is not fetched again for this long: the launches that
waited on that fetch are refused with its reason at once, not one budget after another."""

_key_sets: dict[tuple[int, str, str], tuple[float, t.Any]] = {}
_key_sets_lock = threading.Lock()
_fetching: dict[tuple[int, str, str], threading.Lock] = {}
_failed: dict[tuple[int, str, str], tuple[float, str]] = {}


def _key_set(platform: PlatformRegistration) -> t.Any:
    """The platform's key set, fetched through the outbound client and kept for a while: one
    fetch per platform at a time (launches that arrive meanwhile wait for it and share its
    answer or its refusal), not one per launch."""
    key = _key_set_key(platform)
    with _key_sets_lock:
        cached = _key_sets.get(key)
        fetch_lock = _fetching.setdefault(key, threading.Lock())
    if cached is not None and cached[0] > time.monotonic():
        return cached[1]
    with fetch_lock:
        with _key_sets_lock:
            cached = _key_sets.get(key)
            failed = _failed.get(key)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        if failed is not None and failed[0] > time.monotonic():
            raise LaunchRefused(failed[1])
        try:
            return _fetch_key_set(platform, key)
        except LaunchRefused as exc:
            with _key_sets_lock:
                _failed[key] = (time.monotonic() + KEY_SET_FAILURE_S, str(exc))
            raise


def _fetch_key_set(platform: PlatformRegistration, key: tuple[int, str, str]) -> t.Any:
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
        _failed.pop(key, None)
    return keys


def _key_set_key(platform: PlatformRegistration) -> tuple[int, str, str]:
    return (platform.platform_id, platform.get_key_set_url() or "", platform.kid)


def _forget_key_set(platform: PlatformRegistration) -> bool:
    """Drop a cached key set fetched more than a few seconds ago (True), so that the next
    launch fetches it again; a fresh one stays (an unknown key is then the token's fault)."""
    with _key_sets_lock:
        cached = _key_sets.get(_key_set_key(platform))
        if cached is None or cached[0] - KEY_SET_TTL_S > time.monotonic() - KEY_SET_REFETCH_S:
            return False
        del _key_sets[_key_set_key(platform)]
        return True


class ToolConf(ToolConfAbstract["LtiRequest"]):
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
        return PlatformRegistration(platform, policy(self.settings, platform))

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
class LtiRequest(Request):
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


class Cookies(CookieService):
    def __init__(self, request: LtiRequest) -> None:
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


class LaunchStorage(LaunchDataStorage[t.Any]):
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


class LtiRedirect(Redirect[Response]):
    def __init__(self, location: str, cookies: Cookies) -> None:
        self.location, self.cookies = location, cookies

    def do_redirect(self) -> Response:
        return self.cookies.apply(RedirectResponse(self.location, status_code=302))

    def do_js_redirect(self) -> Response:
        return self.do_redirect()

    def set_redirect_url(self, location: str) -> None:
        self.location = location

    def get_redirect_url(self) -> str:
        return self.location


class Login(OIDCLogin[LtiRequest, ToolConf, t.Any, Cookies, Response]):
    def get_redirect(self, url: str) -> LtiRedirect:
        return LtiRedirect(url, self._cookie_service)

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
    read = {name: body.get(name) for name in ("iss", "sub", "azp", "email", "name",
                                              TARGET_CLAIM)}
    read |= {f"grade service {k}": ags.get(k) for k in ("lineitem", "lineitems")}
    read |= {f"role {i + 1}": r for i, r in enumerate(body.get(ROLES_CLAIM) or [])}
    read |= {f"scope {i + 1}": s for i, s in enumerate(ags.get("scope") or [])}
    read["deep linking return URL"] = (link or {}).get("deep_link_return_url")
    for name, value in read.items():  # what this tool stores or compares with what it stored
        if isinstance(value, str) and (why := text.problem(value, f"the id_token's {name!r}")):
            return why
    return None


class Launch(MessageLaunch[LtiRequest, ToolConf, t.Any, Cookies]):
    def _get_request_param(self, key: str) -> str:
        return self._request.get_param(key)

    def validate_jwt_format(self) -> Launch:
        if not isinstance(self._get_id_token(), str):
            raise LtiException("Missing id_token")
        super().validate_jwt_format()
        if (problem := token_problem(self._jwt.get("header"), self._jwt.get("body"))) is not None:
            raise LtiException(problem)
        return self

    def fetch_public_key(self, key_set_url: str) -> t.Any:
        assert isinstance(self._registration, PlatformRegistration)
        return _key_set(self._registration)

    def get_public_key(self) -> tuple[str, str]:
        try:
            return super().get_public_key()
        except LtiException:
            # A key the cached set lacks: the LMS may have rotated its keys. Fetch once more.
            assert isinstance(self._registration, PlatformRegistration)
            if not _forget_key_set(self._registration):
                raise
            self._registration.set_key_set(None)
            return super().get_public_key()


def parts(request: LtiRequest, session: Session, sessions: sessionmaker[Session],
           settings: ServerSettings) -> tuple[ToolConf, Cookies, LaunchStorage]:
    storage = LaunchStorage(sessions)
    storage.set_request(request)
    return ToolConf(session, settings), Cookies(request), storage


# What pylti1p3 raises on a message it cannot use: its own exceptions, and, for claims of
# unexpected shapes it reads without checking, Python's.
REFUSALS = (LtiException, OIDCException, jwt.PyJWTError, KeyError, ValueError, TypeError,
             AttributeError, IndexError)
