"""Every shipped reference's report, and the serial, closed-form and wrong answers' reports, read
in a real browser as their student opens them: the headline says what happened and what to do
next; the grader's evidence waits, closed, under "How this was measured"; nothing on the page is
a config key, cut mid-sentence or said twice.

The reports are real gradings kept as fixtures (tests/fixtures/reports/record.py remakes them);
this test stores each as its submission's grade, as a runner's result would, and reads the page.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from server.models import AssignmentVersion, Job
from tests.server.live import Platform
from tests.server.reports import store
from tests.web.conftest import SHOTS

pytestmark = [pytest.mark.browser, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
FIXTURES = sorted((REPO / "tests" / "fixtures" / "reports").glob("*.json"))
SAID_FIRST = {  # what the headline card says first, in the student's words
    "t1-serial": "no parallel work",
    "t1-busy": "Performance points pending",  # graded beside a neighbour: tests count now
    "t1-closed-form": "No performance points",
    "t2-closed-form": "Held for review",  # its ranks keep cores busy: a person decides
    "t3-reference": "speedup not measured (simulated GPU)",
    "t4-reference": "needs a GPU runner",
}
NOT_SAID = {  # what would mislead that student
    "t1-serial": "parallel execution explains",
    "t3-reference": "Speedup credited",
    "t1-busy": "Speedup credited",
}
CREDIT = {"credited": "Speedup credited", "capped": "Speedup partly credited",
          "held": "Held for review", "refused": "No performance points",
          "pending": "Performance points pending"}
CONFIG_KEY = re.compile(r"\((scoring|timing|resources|entry|credit|feedback)\.[a-z_]+\)")
SHOWN_IN_THE_GUIDE = ("t1-reference", "t1-serial", "t1-closed-form", "t1-wrong")


def _upload(p: Platform, who: dict[str, str], course: str, slug: str, files: list[str]) -> int:
    r = p.http.post(f"/api/courses/{course}/assignments/{slug}/submissions", headers=who,
                    files=[("files", (Path(f).name, (REPO / f).read_bytes())) for f in files])
    assert r.status_code == 201, r.text
    return int(r.json()["id"])


def test_every_shipped_report_reads_as_its_student_meets_it(  # type: ignore[no-untyped-def]
        platform: Platform, page) -> None:
    assert len(FIXTURES) >= 20, "tests/fixtures/reports/record.py makes them"
    p = platform
    kept: list[dict[str, Any]] = [json.loads(f.read_text()) for f in FIXTURES]
    courses = sorted({Path(k["package"]).parts[-2] for k in kept})
    codes = [p.course(*sorted({"/".join(Path(k["package"]).parts[-2:]) for k in kept
                               if Path(k["package"]).parts[-2] == course}), slug=course)
             for course in courses]
    with p.sessions() as s, s.begin():  # checked, as a runner's validation would leave them
        s.execute(update(AssignmentVersion).values(status="ready"))
    ada = p.student("ada", codes[0])
    for code in codes[1:]:
        r = p.http.post("/api/courses/join", json={"join_code": code}, headers=ada)
        assert r.status_code in (200, 201), r.text
    page.goto(f"{p.base}/login")
    page.fill("input[name=email]", "ada@uni.edu")
    page.fill("input[name=password]", "studentpass1")
    page.click("button[type=submit]")

    for name, k in zip((f.stem for f in FIXTURES), kept, strict=True):
        course, slug = Path(k["package"]).parts[-2:]
        sid = _upload(p, ada, course, slug, k["files"])
        store(p.engine, sid, k["report"])
        with p.sessions() as s, s.begin():  # its job answered, as the runner's result leaves it
            s.execute(update(Job).where(Job.submission_id == sid).values(state="done"))
        report = k["report"]
        page.goto(f"{p.base}/s/{sid}")
        live = page.inner_text("#live")
        assert "position" not in live and "waiting" not in live, (name, live)
        card = page.locator("section[class*=verdict-]").inner_text()
        assert " :" not in card, (name, card)
        heading = card.splitlines()[0]
        assert report["verdict"].replace("_", " ") in heading, (name, heading)
        assert f"{report['score']:g} / {report['max_score']:g} points" in heading, (name, heading)
        if name in SAID_FIRST:
            assert SAID_FIRST[name] in card, (name, card)
            assert card.count(SAID_FIRST[name]) == 1, (name, card)
        if report["credit"] is not None:  # its reason once, in its own box
            assert card.count(report["credit"]["reason"]) == 1, (name, card)
        if name in NOT_SAID:
            assert NOT_SAID[name] not in card, (name, card)
        if report["speedup"] is not None:
            assert f"Speedup {report['speedup']['median']:.2f}×" in card, (name, card)
        if report["credit"] is not None:
            assert CREDIT[report["credit"]["status"]] in card, (name, card)
        failed = [t for t in report["tests"] if t["outcome"] in ("failed", "error")]
        if report["verdict"] == "failed":
            assert failed, name
            rows = page.locator("table.tests tr.failed, table.tests tr.error")
            assert rows.count() == len(failed), name
            for t in failed:
                assert t["message"].strip(), (name, t)  # a failing test says why
            assert "; verdict " not in card and "once every test passes" in card, (name, card)
        for row in page.locator("table.tests tr.skipped").all():  # not marked as a failure
            assert "✘" not in row.inner_text(), (name, row.inner_text())
        text = " ".join((page.text_content("main") or "").split())  # closed sections too
        assert not CONFIG_KEY.search(text), (name, CONFIG_KEY.search(text))
        for note in report["notes"]:
            assert text.count(" ".join(note.split())) == 1, (name, note)  # said once
        if report["notes"] or report["scaling"]:
            measured = page.locator("details.measured")
            assert measured.get_attribute("open") is None, name  # the evidence waits, closed
            assert not page.locator("details.measured p.note").first.is_visible() or \
                not report["notes"], name
        for t in report["tests"]:
            assert " ".join(t["message"].split()) in text, (name, t["name"])  # whole, not cut
        page.screenshot(path=SHOTS / f"report-{name}.png", full_page=True)
    for name in SHOWN_IN_THE_GUIDE:
        assert (SHOTS / f"report-{name}.png").exists()
