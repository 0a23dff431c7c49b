"""Every id and number someone else supplies, in a path, a form or a body, gets a 4xx or its
page, never a 500: a probe generated from the app's own routes, on SQLite and PostgreSQL."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import params
from fastapi.routing import APIRoute

from runners.protocol import MAX_ROW_ID
from tests.server.conftest import RUNNER, World
from tests.server.test_pages import browser, csrf

BAD = ["²", "٣", "-1", "0", str(MAX_ROW_ID + 1), str(2**63), "1e3"]
"""Superscript and Arabic-Indic digits (str.isdigit takes both, int takes only the second), out
of range for either database, and not a whole number."""
FILL = {"course": "th", "slug": "t1-multiprocessing"}


def _routes(routes: list[Any]) -> Iterator[APIRoute]:
    for r in routes:
        if isinstance(r, APIRoute):
            yield r
        elif hasattr(r, "original_router"):  # an included router
            yield from _routes(r.original_router.routes)


def _params(route: APIRoute) -> tuple[list[str], list[str], list[str]]:
    """The route's path parameters, those of them that are ids, and its form fields (the
    CSRF token left out), its dependencies' included."""
    todo, path, ids, form = [route.dependant], [], [], []
    while todo:
        d = todo.pop()
        todo.extend(d.dependencies)
        path += [f.name for f in d.path_params]
        ids += [f.name for f in d.path_params if f.field_info.annotation is int]
        form += [f.name for f in d.body_params if isinstance(f.field_info, params.Form)
                 and f.field_info.annotation is not Any and f.name != "csrf_token"]
    return path, ids, form


def _url(route: APIRoute, values: dict[str, str]) -> str:
    return re.sub(r"{(\w+)(:\w+)?}", lambda m: values[m.group(1)], route.path)


class Caller:
    """One user, through the API (a bearer token) or the pages (a browser with its CSRF)."""

    def __init__(self, world: World, who: str, password: str, api: dict[str, str]) -> None:
        self.api = api
        self.page = browser(world, who, password)
        self.token = csrf(self.page.get("/").text)
        self.plain = world.client

    def send(self, method: str, url: str, form: dict[str, str] | None = None) -> int:
        if url.startswith("/api/runner/"):
            return self.plain.request(method, url, headers=RUNNER).status_code
        if url.startswith("/api/"):
            return self.plain.request(method, url, headers=self.api).status_code
        data = None if method == "GET" else {"csrf_token": self.token, **(form or {})}
        return self.page.request(method, url, data=data).status_code


def test_no_id_or_number_anyone_sends_reaches_a_server_error(world: World) -> None:
    callers = [Caller(world, "ada@uni.edu", "studentpass1", world.ada),
               Caller(world, "prof@uni.edu", "prof-pass-4821", world.prof)]
    routes = list(_routes(world.client.app.routes))
    probed: set[str] = set()
    errors = []
    for route in routes:
        path, ids, form = _params(route)
        good = {**FILL, **{p: "1" for p in path if p not in FILL}}
        method = sorted(route.methods)[0]
        tries = [(_url(route, {**good, p: bad}), {}) for p in ids for bad in BAD]
        filled = {f: "x" for f in form}
        tries += [(_url(route, good), {**filled, f: value}) for f in form
                  for value in [*BAD, "", *(f"item:{bad}" for bad in BAD[:2] + BAD[4:6])]]
        for url, fields in tries:
            for caller in callers:
                status = caller.send(method, url, fields)
                if status >= 500:
                    errors.append((status, method, url, fields))
        if tries:
            probed.add(route.path)
    assert not errors, errors[:10]
    # The probe reached the routes of the findings (the regrade form, a comment's line, a
    # path id on the grading pages and in the API).
    assert {"/c/{course}/{slug}/feedback/regrade", "/c/{course}/{slug}/grading/{grade_id}/comments",
            "/api/submissions/{submission_id}", "/s/{submission_id}"} <= probed, sorted(probed)


@pytest.mark.parametrize("item_id", [MAX_ROW_ID + 1, 2**63, 0])
def test_an_id_in_a_body_past_the_databases_range_is_a_422(world: World, item_id: int) -> None:
    r = world.post(world.ada, "/api/courses/th/assignments/t1-multiprocessing/feedback/"
                   "regrade-requests", json={"reason": "please look again", "item_id": item_id})
    assert r.status_code == 422, r.text
    hello = {"name": "r1", "queues": ["cpu"], "backend": "bwrap", "cores": 2, "memory_mb": 1024}
    r = world.client.post("/api/runner/hello", json={**hello, "current_job": item_id},
                          headers=RUNNER)
    assert r.status_code == 422 and "current_job" in r.text, r.text
    assert world.client.post("/api/runner/hello", json=hello, headers=RUNNER).status_code == 204


def test_a_form_number_is_ascii_digits_in_range() -> None:
    from server.web.plumbing import form_number

    assert [form_number(t) for t in ("7", " 42 ", str(MAX_ROW_ID))] == [7, 42, MAX_ROW_ID]
    assert all(form_number(t) is None for t in [*BAD, "", "+3", "3.0", "0x10", "1" * 400])
    assert form_number("12", high=10) is None


def test_the_final_run_takes_its_rounds_as_a_number_only(world: World) -> None:
    r = world.post(world.prof, "/api/courses/th/assignments/t1-multiprocessing/final-runs",
                   json={"rounds": "3"})
    assert r.status_code == 422 and "rounds" in r.text, r.text

