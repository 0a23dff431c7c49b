"""LMS platforms registered for a course: each with the tool's own key pair for it, the policy for
the requests made to it, and the transport pylti1p3 sends them on."""

from __future__ import annotations

import functools
import secrets
import typing as t
from urllib.parse import urlparse

import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from pylti1p3.registration import Registration
from sqlalchemy import select
from sqlalchemy.orm import Session

from server.models import AuditLog, Course, LtiPlatform, User
from server.services.records import outbound
from server.services.records.errors import Conflict, Forbidden, Invalid
from server.settings import ServerSettings


def policy(settings: ServerSettings, platform: LtiPlatform) -> outbound.Policy:
    """What requests made for this platform may reach: its own setting lets a test LMS on a
    private address in; outside development, only where the operator allows that at all."""
    development = settings.environment == "development"
    return outbound.Policy(
        https_only=not development,
        allow_private=platform.allow_private_network and (
            development or settings.outbound_private_networks),
        budget_s=settings.outbound_budget_s, max_bytes=settings.outbound_max_bytes)


class LmsHttp(requests.Session):
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
    return _public_of(platform.tool_private_key)


@functools.lru_cache(maxsize=4096)
def _public_of(private_pem: str) -> str:
    """The public half of a tool key, computed once per key: loading an RSA private key checks
    it (≈ 65 ms of CPU with the GIL held), which every launch and /lti/jwks would otherwise pay,
    stalling the server's event loop beside a burst of launches."""
    key = serialization.load_pem_private_key(private_pem.encode(), password=None)
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def jwks(*, session: Session) -> dict[str, list[dict[str, t.Any]]]:
    """The tool's public keys, one per registered platform (what an LMS verifies us with)."""
    return {"keys": [{**Registration.get_jwk(public_pem(p)), "kid": p.tool_kid}
                     for p in session.scalars(select(LtiPlatform).order_by(LtiPlatform.id))]}


class PlatformRegistration(Registration):
    def __init__(self, platform: LtiPlatform, policy: outbound.Policy) -> None:
        super().__init__()
        self.kid, self.platform_id, self.policy = platform.tool_kid, platform.id, policy
        (self.set_issuer(platform.issuer).set_client_id(platform.client_id)
         .set_auth_login_url(platform.auth_login_url).set_auth_token_url(platform.auth_token_url)
         .set_key_set_url(platform.key_set_url).set_tool_private_key(platform.tool_private_key)
         .set_tool_public_key(public_pem(platform)))

    def get_kid(self) -> str | None:
        return self.kid
