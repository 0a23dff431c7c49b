"""A stand-in LMS (test double: no LMS runs here) for LTI 1.3 tests: a real HTTP server on
127.0.0.1 with its own RSA key, serving its JWKS, an OAuth2 token endpoint that checks the tool's
signed client assertion against the tool's JWKS, and an AGS score endpoint that keeps a
gradebook; it signs launch id_tokens the way an LMS does after its OIDC authorization step."""

from __future__ import annotations

import json
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

LTI = "https://purl.imsglobal.org/spec/lti/claim/"
AGS = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"
SCORE = "https://purl.imsglobal.org/spec/lti-ags/scope/score"


@dataclass
class StandInLms:
    issuer: str = "https://lms.example.edu"
    client_id: str = "paragrade-tool"
    deployment_id: str = "deployment-1"
    key: Any = field(default_factory=lambda: rsa.generate_private_key(public_exponent=65537,
                                                                      key_size=2048))
    kid: str = "lms-key-1"
    tool_jwks: dict[str, Any] = field(default_factory=dict)  # the tool's, set after registering
    gradebook: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    fail_scores: int = 0  # answer the next N score posts with 503
    tokens: set[str] = field(default_factory=set)
    url: str = ""
    tool: str = "http://testserver"  # where the tool (paragrade) answers
    next_target: str = ""  # the link the last /start launched
    people: dict[str, dict[str, str]] = field(default_factory=lambda: {
        "student-1": {"email": "lea@uni.edu", "name": "Lea", "role": "Learner"}})

    def __post_init__(self) -> None:
        lms = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _html(self, status: int, html: str, location: str | None = None) -> None:
                data = html.encode()
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                url = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                if url.path == "/jwks":
                    self._send(200, lms.jwks())
                elif url.path == "/start":  # a student clicks the tool's link in the course
                    lms.next_target = query["target"]
                    self._html(302, "", f"{lms.tool}/lti/login?" + urlencode(
                        lms.login_params(query["target"], query.get("user", "student-1"))))
                elif url.path == "/auth":  # the OIDC authorization step: post the launch
                    self._html(200, lms.auto_post(query))
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path == "/token":
                    self._send(*lms.token(parse_qs(body.decode())))
                elif self.path.startswith("/lineitems/") and self.path.endswith("/scores"):
                    self._send(*lms.score(self.path, self.headers.get("Authorization", ""),
                                          json.loads(body)))
                else:
                    self._send(404, {"error": "not found"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # --- what it serves ---------------------------------------------------------------------
    def jwks(self) -> dict[str, Any]:
        public = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**public, "kid": self.kid, "alg": "RS256", "use": "sig"}]}

    def token(self, form: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        assertion = form.get("client_assertion", [""])[0]
        try:
            kid = jwt.get_unverified_header(assertion).get("kid")
            key = next(RSAAlgorithm.from_jwk(json.dumps(k)) for k in self.tool_jwks["keys"]
                       if k.get("kid") == kid)
            claims = jwt.decode(assertion, key, algorithms=["RS256"],  # type: ignore[arg-type]
                                audience=f"{self.url}/token")
        except (jwt.InvalidTokenError, StopIteration, KeyError) as exc:
            return 401, {"error": "invalid_client", "detail": str(exc)}
        if claims.get("sub") != self.client_id:
            return 401, {"error": "invalid_client"}
        token = secrets.token_urlsafe(16)
        self.tokens.add(token)
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": 3600,
                     "scope": form.get("scope", [""])[0]}

    def score(self, path: str, auth: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if auth.removeprefix("Bearer ") not in self.tokens:
            return 401, {"error": "no token"}
        if self.fail_scores > 0:
            self.fail_scores -= 1
            return 503, {"error": "gradebook unavailable"}
        self.gradebook[(path.removesuffix("/scores"), body["userId"])] = body
        return 200, {}

    # --- what a registration and a launch look like -------------------------------------------
    def registration(self) -> dict[str, Any]:
        return {"issuer": self.issuer, "client_id": self.client_id,
                "auth_login_url": f"{self.url}/auth", "auth_token_url": f"{self.url}/token",
                "key_set_url": f"{self.url}/jwks", "deployment_ids": [self.deployment_id],
                "allow_private_network": True}  # it listens on 127.0.0.1

    def login_params(self, target: str, login_hint: str = "student-1") -> dict[str, str]:
        return {"iss": self.issuer, "login_hint": login_hint, "target_link_uri": target,
                "client_id": self.client_id, "lti_deployment_id": self.deployment_id}

    def id_token(self, *, nonce: str, target: str, sub: str = "student-1",
                 email: str = "lea@uni.edu", name: str = "Lea", role: str = "Learner",
                 lineitem: str | None = "/lineitems/7", expires_in: int = 300,
                 issuer: str | None = None, deployment: str | None = None,
                 key: Any = None, deep_link_return: str | None = None) -> str:
        claims: dict[str, Any] = {
            "iss": issuer or self.issuer, "aud": self.client_id, "sub": sub, "nonce": nonce,
            "iat": int(time.time()), "exp": int(time.time()) + expires_in, "email": email,
            "name": name,
            LTI + "message_type": "LtiResourceLinkRequest", LTI + "version": "1.3.0",
            LTI + "deployment_id": deployment or self.deployment_id,
            LTI + "target_link_uri": target,
            LTI + "resource_link": {"id": f"link-{uuid.uuid4().hex[:6]}"},
            LTI + "roles": [f"http://purl.imsglobal.org/vocab/lis/v2/membership#{role}"],
        }
        if deep_link_return is not None:  # an instructor places the tool's links
            claims[LTI + "message_type"] = "LtiDeepLinkingRequest"
            del claims[LTI + "resource_link"]
            claims["https://purl.imsglobal.org/spec/lti-dl/claim/deep_linking_settings"] = {
                "deep_link_return_url": deep_link_return, "accept_types": ["ltiResourceLink"],
                "accept_presentation_document_targets": ["window"], "accept_multiple": True}
        elif lineitem is not None:
            claims[AGS] = {"scope": [SCORE], "lineitem": f"{self.url}{lineitem}"}
        pem = (key or self.key).private_bytes(serialization.Encoding.PEM,
                                              serialization.PrivateFormat.PKCS8,
                                              serialization.NoEncryption())
        return jwt.encode(claims, pem, algorithm="RS256", headers={"kid": self.kid})

    def auto_post(self, auth: dict[str, str]) -> str:
        """What the LMS answers the authorization request with: a page that posts the signed
        launch to the tool's redirect_uri (OIDC form_post)."""
        person = self.people[auth["login_hint"]]
        token = self.id_token(nonce=auth["nonce"], target=self.next_target,
                              sub=auth["login_hint"], email=person.get("email", "lea@uni.edu"),
                              name=person.get("name", "Lea"),
                              role=person.get("role", "Learner"))
        return (f'<form id="f" method="post" action="{escape(auth["redirect_uri"])}">'
                f'<input type="hidden" name="id_token" value="{escape(token)}">'
                f'<input type="hidden" name="state" value="{escape(auth["state"])}"></form>'
                '<script>document.getElementById("f").submit()</script>')

    @staticmethod
    def authorize(redirect: str) -> dict[str, str]:
        """The OIDC authorization request the tool sent the browser to: state, nonce, …"""
        return {k: v[0] for k, v in parse_qs(urlparse(redirect).query).items()}
