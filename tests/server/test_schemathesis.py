"""Property-based API fuzzing: schemathesis drives every operation of the app's OpenAPI spec.

In-process (ASGI, no network), over the `world` fixture. Every operation runs as a student and as
the instructor (bearer tokens); the runner endpoints run as the runner too, with a job it has just
claimed. Path parameters are either generated or pinned to real objects (course `th`, assignment
t1, a real submission, the claimed job), so cases get past the 404s into the handlers; invalid
(negative) cases are generated as well. No response may be a 5xx, and every one must conform to
the spec: documented status code, content type, headers and body schema.

Deterministic by default (derandomized). FUZZ_EXAMPLES=300 runs that many random cases per
operation and identity, to hunt for new failures.

The second test pins each failure the fuzzing found once, so it cannot come back.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import APIOperation, Case, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from server.models import User
from server.services.people import users as user_service

from .conftest import REFERENCE, World, bearer, claim

MAX_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "15"))
RUNNER = {**bearer("runner-secret-1234"),  # the `settings` fixture's runner token
          "X-Runner-Key": "test-runner-key-0123456789"}  # conftest.claim's runner process
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance]
# These revoke the token they are called with: each case gets a fresh one.
REVOKING = {("DELETE", "/api/auth/token"), ("DELETE", "/api/auth/session")}


def _fresh_token(world: World, email: str) -> str:
    app: Any = world.client.app
    with app.state.sessions() as s, s.begin():
        user = s.query(User).filter_by(email=email).one()
        return user_service.issue_token(session=s, user=user)


def _strategy(op: APIOperation, real: dict[str, Any], headers: dict[str, str]) -> st.SearchStrategy[Case]:
    """Valid cases with generated or real path parameters, and invalid ones."""
    mine = {k: v for k, v in real.items() if k in {p.name for p in op.path_parameters}}
    fixed = headers or None
    options = [op.as_strategy(headers=fixed),
               op.as_strategy(GenerationMode.NEGATIVE, path_parameters=mine or None, headers=fixed)]
    if mine:
        options.append(op.as_strategy(path_parameters=mine, headers=fixed))
    return st.one_of(options)


def _fuzz(strategy: st.SearchStrategy[Case], prepare: Callable[[Case], None]) -> None:
    @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None,
              derandomize="FUZZ_EXAMPLES" not in os.environ,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def run(case: Case) -> None:
        prepare(case)
        case.call_and_validate(checks=CHECKS)

    run()


def _claim(world: World) -> dict[str, Any]:
    """A job just claimed (the fuzzed regrades supersede older jobs and void their tokens)."""
    r = world.client.patch("/api/courses/th/assignments/t1-multiprocessing",
                           json={"deadline": None, "quota_count": 10_000}, headers=world.prof)
    assert r.status_code == 200, r.text  # undo a fuzzed deadline or quota
    assert world.submit(world.bob, REFERENCE).status_code == 201
    offer = claim(world.client)
    assert offer is not None
    return offer


@pytest.mark.slow
@pytest.mark.concurrent  # a minute of requests to an in-process server: beside the other workers
# On PostgreSQL only (the production database, and the stricter one: NUL bytes, integer ranges);
# every API test also runs on SQLite.
@pytest.mark.parametrize("engine", ["postgresql"], indirect=True)
def test_every_operation_conforms_and_never_errors(world: World) -> None:
    r = world.submit(world.ada, REFERENCE)
    assert r.status_code == 201, r.text
    real: dict[str, Any] = {"course": "th", "slug": "t1-multiprocessing", "submission_id": r.json()["id"]}
    schema = schemathesis.openapi.from_asgi("/openapi.json", world.client.app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 20

    identities = [("student", "ada@uni.edu", world.ada), ("instructor", "prof@uni.edu", world.prof),
                  ("runner", "", RUNNER)]
    failures, ran = [], 0
    for who, email, auth in identities:
        headers: dict[str, str] = {}
        if who == "runner":
            offer = _claim(world)
            real["job_id"], headers = offer["job_id"], {"X-Job-Token": offer["token"]}
        for op in operations:
            if who == "runner" and not op.path.startswith("/api/runner/"):
                continue
            revoking = (op.method.upper(), op.path) in REVOKING
            records = who == "runner" and op.path.endswith("/result")

            def prepare(case: Case, auth: dict[str, str] = auth, email: str = email,
                        revoking: bool = revoking, records: bool = records) -> None:
                case.headers = {**(case.headers or {}), **auth}
                if revoking:
                    case.headers["Authorization"] = f"Bearer {_fresh_token(world, email)}"
                if records and (case.path_parameters or {}).get("job_id") == real["job_id"]:
                    # A result is recorded once: each case posts to a job of its own.
                    offer = _claim(world)
                    case.path_parameters = {"job_id": offer["job_id"]}
                    case.headers["X-Job-Token"] = offer["token"]

            ran += 1
            try:
                _fuzz(_strategy(op, real, headers), prepare)
            except (Exception, BaseExceptionGroup) as exc:  # schemathesis raises a FailureGroup
                failures.append(f"--- as {who}: {op.label}\n" + "".join(traceback.format_exception(exc)))
    assert ran >= 2 * len(operations)
    assert not failures, f"{len(failures)} failing (identity, operation) pairs:\n" + "\n".join(failures)


def test_what_the_fuzzing_found_stays_fixed(world: World) -> None:
    c, prof, ada = world.client, world.prof, world.ada
    t1 = "/api/courses/th/assignments/t1-multiprocessing"
    sub = world.submit(ada, REFERENCE).json()
    # Times carry their offset (SQLite returns them naive), and a deadline keeps its instant.
    assert datetime.fromisoformat(sub["created_at"]).tzinfo is not None
    r = c.patch(t1, json={"deadline": "2030-12-01T23:59:00+01:00"}, headers=prof)
    assert r.status_code == 200, r.text
    assert datetime.fromisoformat(r.json()["deadline"]) == datetime.fromisoformat("2030-12-01T22:59:00Z")
    # Only the deadline may be cleared; the other policies are NOT NULL columns.
    for key in ("late_policy", "late_penalty", "quota_count", "quota_window_s"):
        r = c.patch(t1, json={key: None}, headers=prof)
        assert r.status_code == 422 and key in r.json()["detail"], (key, r.text)
    assert c.patch(t1, json={"deadline": None}, headers=prof).json()["deadline"] is None
    # Ids beyond the INTEGER columns: 404 or 422, not a database error.
    huge = 2**63
    for url in (f"/api/submissions/{huge}", f"/api/submissions/{huge}/files",
                f"/api/submissions/{huge}/gradescope.json"):
        assert c.get(url, headers=prof).status_code in (404, 422), url
    assert c.post(f"/api/submissions/{huge}/regrade", headers=prof).status_code in (404, 422)
    assert c.get(f"/api/runner/jobs/{huge}/bundle",
                 headers={**RUNNER, "X-Job-Token": "x"}).status_code == 422
    # NUL characters (PostgreSQL text cannot hold them) are refused, not stored.
    for url, body in (("/api/courses", {"slug": "nul", "title": "a\x00b"}),
                      ("/api/auth/token", {"email": "a\x00@b.c", "password": "x"}),
                      ("/api/courses/th/assignments/import", {"path": "a\x00b"})):
        r = c.post(url, json=body, headers=prof)
        assert r.status_code == 422 and "NUL" in r.json()["detail"], (url, r.text)
    assert c.post("/api/runner/jobs/1/claim", params={"runner": "a\x00"},
                  headers=RUNNER).status_code == 422
    for url in ("/api/courses/t%00h/assignments", "/api/courses/th/assignments/t%001",
                "/api/courses/th/assignments/t%001/leaderboard"):  # refused before any route
        r = c.get(url, headers=ada)
        assert r.status_code == 422 and "U+0000" in r.json()["detail"], (url, r.text)
    # Errors of the runner and export routers have the app's error shape, as documented.
    r = c.get("/api/runner/jobs/x/bundle", headers={**RUNNER, "X-Job-Token": "x"})
    assert r.status_code == 422 and isinstance(r.json()["detail"], str)
    spec = c.get("/openapi.json").json()["paths"]
    for path, method in (("/api/runner/jobs/{job_id}/bundle", "get"),
                         ("/api/submissions/{submission_id}/gradescope.json", "get")):
        ref = spec[path][method]["responses"]["422"]["content"]["application/json"]["schema"]["$ref"]
        assert ref.endswith("/ErrorPublic"), path
    # A body that is not even text is a documented 400.
    r = c.post("/api/auth/token", content=b'{"email": "\xff"}',
               headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "400" in spec["/api/auth/token"]["post"]["responses"]
