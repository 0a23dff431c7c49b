"""Property tests: whatever anyone posts to the launch, registration and roster routes, the
answer is never a 5xx (a crash there is an unauthenticated way to fill the logs, and often a
missing check)."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server.conftest import World
from tests.server.lms import AGS, LTI, StandInLms
from tests.server.test_security_lti import TARGET, _browser, _claims, _register, _sign, _start

pytestmark = pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                 max_size=4),
    max_leaves=12)
CLAIMS = ["iss", "aud", "sub", "nonce", "exp", "iat", "azp", "email", "name", AGS,
          LTI + "roles", LTI + "deployment_id", LTI + "message_type", LTI + "version",
          LTI + "target_link_uri", LTI + "resource_link", LTI + "context",
          "https://purl.imsglobal.org/spec/lti-dl/claim/deep_linking_settings"]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@pytest.fixture
def lms(world: World) -> Iterator[StandInLms]:
    lms = StandInLms()
    _register(world, lms)
    yield lms
    lms.close()


@FUZZ
@given(changes=st.dictionaries(st.sampled_from(CLAIMS), json_values, max_size=3),
       dropped=st.lists(st.sampled_from(CLAIMS), max_size=2),
       header=st.none() | json_values)
def test_a_launch_token_of_any_shape_never_crashes(world: World, lms: StandInLms,
                                                   changes: dict[str, Any], dropped: list[str],
                                                   header: Any) -> None:
    b = _browser(world)
    auth = _start(b, lms)
    claims = {k: v for k, v in {**_claims(lms, auth["nonce"]), **changes}.items()
              if k not in dropped}
    r = b.post("/lti/launch", data={"id_token": _sign(lms, claims, header),
                                    "state": auth["state"]})
    assert r.status_code < 500, (claims, r.text)


@FUZZ
@given(token=st.one_of(st.text(max_size=200), st.builds(
    lambda h, c, s: f"{_b64(h)}.{_b64(c)}.{s}",
    st.binary(max_size=60) | json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=60) | json_values.map(lambda v: json.dumps(v).encode()),
    st.text(max_size=20))), state=st.none() | st.text(max_size=40),
    extra=st.dictionaries(st.text(max_size=12), st.text(max_size=20), max_size=3))
def test_a_launch_post_of_any_content_never_crashes(world: World, lms: StandInLms, token: str,
                                                    state: str | None,
                                                    extra: dict[str, str]) -> None:
    b = _browser(world)
    auth = _start(b, lms)
    form = {**extra, "id_token": token, "state": auth["state"] if state is None else state}
    assert b.post("/lti/launch", data=form).status_code < 500
    assert b.get("/lti/login", params=extra).status_code < 500


@FUZZ
@given(body=st.dictionaries(st.sampled_from(["email", "name", "password", "join_code", "alias"]),
                            json_values, max_size=5),
       good_code=st.booleans(),
       text=st.fixed_dictionaries({}, optional={
           "email": st.emails(), "name": st.text(max_size=80),
           "password": st.text(min_size=6, max_size=260), "alias": st.text(max_size=70)}))
def test_registration_of_any_content_never_crashes(world: World, body: dict[str, Any],
                                                   good_code: bool, text: dict[str, Any]) -> None:
    payload = {**body, **text}
    if good_code:
        payload["join_code"] = world.join_code
    # Sent as Python writes JSON: an infinite float goes as `Infinity`, which a client may send.
    assert world.client.post("/api/auth/register", content=json.dumps(payload),
                             headers={"Content-Type": "application/json"}).status_code < 500
    b = _browser(world)
    page = b.get("/register")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    form = {k: v if isinstance(v, str) else json.dumps(v) for k, v in payload.items()}
    r = b.post("/register", data={**form, "csrf_token": csrf.group(1) if csrf else ""})
    assert r.status_code < 500


@FUZZ
@given(data=st.one_of(
    st.binary(max_size=400),
    st.lists(st.lists(st.text(max_size=30), max_size=5), max_size=8).map(
        lambda rows: "\n".join(",".join(r) for r in [["email", "name", "alias"], *rows])
        .encode()),
    st.lists(st.tuples(st.emails(), st.text(max_size=20), st.text(max_size=70)), max_size=6).map(
        lambda rows: ("email;name;alias\n" + "\n".join(";".join(r) for r in rows)).encode())))
def test_a_roster_of_any_content_never_crashes(world: World, data: bytes) -> None:
    r = world.post(world.prof, "/api/courses/th/roster", files={"roster": ("r.csv", data)})
    assert r.status_code < 500, r.text


def test_the_launch_target_is_the_one_in_the_token(world: World, lms: StandInLms) -> None:
    """The fuzzed launches above start from this one, which gets in."""
    b = _browser(world)
    auth = _start(b, lms)
    r = b.post("/lti/launch", data={"id_token": _sign(lms, _claims(lms, auth["nonce"])),
                                    "state": auth["state"]})
    assert r.status_code == 303 and r.headers["location"].endswith(TARGET.rsplit("/c", 1)[1])
