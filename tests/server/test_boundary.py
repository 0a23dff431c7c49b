"""Text outside a JSON body (server/boundary.py), on SQLite and PostgreSQL: a control character
in any route's address, any query string or any form field is a 422 naming it, never a 5xx and
never stored. The routes and forms come from the app itself, so a route added later is covered."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from fastapi.routing import APIRoute
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select
from starlette.routing import Route

from server.db import session_factory
from server.models import LtiIdentity
from tests.server.conftest import RUNNER, World
from tests.server.lms import AGS, StandInLms
from tests.server.test_pages import browser, csrf
from tests.server.test_security_lti import _browser, _claims, _register, _sign, _start

CONTROLS = ["\x00", "\x1b", "\x07", "\u202e", "\u2028", "\x7f"]
PARAM = re.compile(r"\{([^}:]+)(:[^}]*)?\}")
FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def _routes(world: World) -> list[tuple[str, str, list[str], list[str]]]:
    """(method, path, path parameters, form fields) of every route the app serves."""
    out = []
    for prefix, route in _every(world.client.app.routes, ""):  # type: ignore[attr-defined]
        path = prefix + route.path
        params = [m.group(1) for m in PARAM.finditer(path)]
        fields: list[str] = []
        if isinstance(route, APIRoute) and route.body_field is not None and any(
                "Form" in type(f.field_info).__name__ for f in _flat(route)):
            fields = [f.alias for f in _flat(route)]
        for method in sorted(route.methods or ()):
            if method != "HEAD":
                out.append((method, path, params, fields))
    return out


def _every(routes: list[Any], prefix: str) -> list[tuple[str, Route]]:
    """Every route under these, with the prefix it is included under (FastAPI includes a router
    as one entry of the app's routes; mounts, static files and the guide, are left out)."""
    out: list[tuple[str, Route]] = []
    for route in routes:
        if (inner := getattr(route, "original_router", None)) is not None:
            out += _every(inner.routes, prefix + route.include_context.prefix)
        elif isinstance(route, Route):
            out.append((prefix, route))
    return out


def _flat(route: APIRoute) -> list[Any]:
    return list(route.dependant.body_params)


def _fill(path: str, bad: str | None, char: str) -> str:
    """The path with every parameter a plausible value; `bad`'s value carries `char`."""
    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        value = "1" if name.endswith("id") else "th" if name == "course" else "a"
        return (value + quote(char) + "x") if name == bad else value
    return PARAM.sub(one, path)


def test_every_address_parameter_with_a_control_character_is_refused(world: World) -> None:
    routes = [r for r in _routes(world) if r[2]]
    assert len(routes) > 40  # every kind of route is here: API and pages, ids and names
    b = browser(world, "prof@uni.edu", "prof-pass-4821")
    for method, path, params, _ in routes:
        for param in params:
            url = _fill(path, param, "\x00")
            r = (world.client if path.startswith("/api/") else b).request(
                method, url, headers=world.prof if path.startswith("/api/") else {})
            assert r.status_code == 422, (method, url, r.status_code, r.text[:200])
            assert "control character (U+0000" in r.json()["detail"], r.text


def test_every_form_field_with_a_control_character_is_refused(world: World) -> None:
    forms = [r for r in _routes(world) if r[3]]
    assert len(forms) > 10
    b = browser(world, "prof@uni.edu", "prof-pass-4821")
    token = csrf(b.get("/").text)
    for method, path, _, fields in forms:
        for field in fields:
            data = {f: "x" for f in fields} | {"csrf_token": token, field: "a\x00b"}
            r = b.request(method, _fill(path, None, ""), data=data)
            assert r.status_code == 422, (path, field, r.status_code, r.text[:200])
            assert f"the form field {field} contains" in r.json()["detail"] or (
                "password" in field and "NUL" in r.json()["detail"]), r.text


def test_the_reported_anonymous_crashes_are_refusals(world: World) -> None:
    c = world.client
    r = c.post("/login", data={"email": "al\x00ice@uni.edu", "password": "x", "next": "/"})
    assert r.status_code == 422 and "form field email" in r.json()["detail"], r.text
    for claim in ("iss", "client_id"):
        r = c.get("/lti/login", params={"iss": "https://lms.example", "client_id": "x",
                                        "login_hint": "1", "target_link_uri": "https://t/",
                                        claim: "a\x00b"})
        assert r.status_code == 422 and f"query parameter {claim}" in r.json()["detail"], r.text
    r = c.put("/api/courses/th/members/a%00b@uni.edu", json={"role": "ta"}, headers=world.prof)
    assert r.status_code == 422, r.text
    # A password may hold anything but NUL (it is never shown): a tab is no refusal.
    r = c.post("/login", data={"email": "ada@uni.edu", "password": "pass\tword", "next": "/"})
    assert r.status_code != 422, r.text


@FUZZ
@given(pick=st.integers(0, 10_000), char=st.sampled_from(CONTROLS),
       where=st.sampled_from(["address", "query", "form"]))
def test_any_route_with_any_control_character_anywhere_is_a_422(world: World, pick: int,
                                                                char: str, where: str) -> None:
    routes = _routes(world)
    method, path, params, fields = routes[pick % len(routes)]
    api = path.startswith("/api/")
    headers = world.prof if api else {}
    url = _fill(path, params[0] if where == "address" and params else None, char)
    kw: dict[str, Any] = {}
    if where == "query":
        kw["params"] = {"q": f"a{char}b"}
    elif where == "form":
        kw["data"] = {(fields[0] if fields else "field"): f"a{char}b"}
    r = world.client.request(method, url, headers=headers, **kw)
    assert r.status_code < 500, (method, url, r.status_code, r.text[:200])
    refused = where == "query" or (where == "address" and params) or (
        where == "form" and not (fields and "password" in fields[0] and char != "\x00"))
    if refused:
        assert r.status_code == 422 and "contains" in r.json()["detail"], (method, url, r.text)


def test_a_signed_launch_with_a_control_character_in_a_stored_claim_is_refused(
        world: World, engine: Any) -> None:
    lms = StandInLms()
    _register(world, lms)
    b = _browser(world)
    for claim, char in (("sub", "\x00"), ("sub", "\x1b"), ("sub", "\u202e"), ("lineitem", "\x00"),
                        ("email", "\x00"), ("iss", "\u202e")):
        auth = _start(b, lms)
        claims = _claims(lms, auth["nonce"])
        if claim == "lineitem":
            claims[AGS] = {**claims[AGS], "lineitem": f"{lms.url}/lineitems/7{char}"}
        else:
            claims[claim] = f"{claims[claim]}{char}x"
        r = b.post("/lti/launch", data={"id_token": _sign(lms, claims), "state": auth["state"]})
        assert r.status_code == 403 and "control character" in r.text, (claim, r.status_code,
                                                                         r.text[:300])
    with session_factory(engine)() as s:  # nothing of those launches was stored
        assert s.scalar(select(func.count()).select_from(LtiIdentity)) == 0
    auth = _start(b, lms)  # the same launch without the character gets in
    r = b.post("/lti/launch", data={"id_token": _sign(lms, _claims(lms, auth["nonce"])),
                                    "state": auth["state"]})
    assert r.status_code == 303, r.text
    lms.close()


def test_a_runner_hello_with_a_nul_in_any_text_is_refused(world: World) -> None:
    hello = {"name": "r1", "queues": ["cpu"], "backend": "bwrap", "cores": 1, "memory_mb": 1,
             "gpu_model": "g", "mpi": "m", "image": "i"}
    for field in ("name", "backend", "gpu_model", "mpi", "image"):
        r = world.client.post("/api/runner/hello", headers=RUNNER,
                              json={**hello, field: "a\x00b"})
        assert r.status_code == 422, (field, r.status_code, r.text)
    assert world.client.post("/api/runner/hello", headers=RUNNER, json=hello).status_code == 204


def test_a_deadline_is_iso_8601_text_and_an_unknown_field_is_named(world: World) -> None:
    url = "/api/courses/th/assignments/t1-multiprocessing"
    for value in ("0", "-1", "1700000000", "0.5", " 12 ", 0, 1.5, True, "tomorrow"):
        r = world.client.patch(url, json={"deadline": value}, headers=world.prof)
        assert r.status_code == 422 and "ISO 8601" in r.text, (value, r.status_code, r.text)
    assert world.get(world.prof, url).json()["deadline"] is None  # nothing was set
    r = world.client.patch(url, json={"deadline": "2027-01-20T12:00:00+00:00", "quota": 3},
                           headers=world.prof)
    assert r.status_code == 422 and "quota" in r.text, r.text
    r = world.client.patch(url, json={"deadline": "2027-01-20T12:00:00+00:00"},
                           headers=world.prof)
    assert r.status_code == 200 and r.json()["deadline"].startswith("2027-01-20T12:00"), r.text


@settings(FUZZ, max_examples=150)
@given(pick=st.integers(0, 10_000), where=st.sampled_from(["address", "query", "form"]),
       value=st.one_of(st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=40),
                       st.integers(-2**70, 2**70).map(str)))
def test_any_route_with_any_value_anywhere_never_crashes(world: World, pick: int, where: str,
                                                         value: str) -> None:
    """Not only control characters: any text or number, in any route's address, query string or
    form field, as the instructor (who reaches the most routes), is never a 5xx."""
    routes = _routes(world)
    method, path, _, fields = routes[pick % len(routes)]
    api = path.startswith("/api/")

    def fill(m: re.Match[str]) -> str:
        return quote(value, safe="") or "x" if where == "address" else "1"

    url = PARAM.sub(fill, path)
    kw: dict[str, Any] = {}
    if where == "query":
        kw["params"] = {"q": value, **{f: value for f in fields[:2]}}
    elif where == "form":
        kw["data"] = {f: value for f in fields} or {"field": value}
    r = world.client.request(method, url, headers=world.prof if api else {}, **kw)
    assert r.status_code < 500, (method, url, where, value, r.status_code, r.text[:200])
