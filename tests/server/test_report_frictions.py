"""A report as its readers meet it, on SQLite and PostgreSQL: the staff read a hidden test's whole
message on the page (the student the message written on purpose); the tests a timeout left
unrun are one row; test names wrap only where a reader would break them; the grades CSV says
every time with its zone and the version each grade was made under; results.json and the CSV
come as downloads."""

from __future__ import annotations

import csv
import io
from typing import Any

from sqlalchemy import Engine

from runners.grading import render
from runners.protocol import GradeReport, JobOutcome
from server.web import report_text
from tests.server.conftest import REFERENCE, RUNNER, World, claim
from tests.server.reports import sample_report
from tests.server.test_pages import browser

WRITTEN = "Ten numbers: wrong answer"
WHOLE = "Ten numbers: assert 11774 == 9370"
NOT_RUN = ("not run: an earlier test (hidden/test_hidden.py::test_big) exceeded its time limit, "
           "so the tests after it with as long a limit were not run")


def _report() -> dict[str, Any]:
    report: dict[str, Any] = sample_report(passed=False)
    first = report["tests"][0]
    first.update(message=WRITTEN, held_message=WHOLE)
    report["tests"] += [{**first, "name": f"hidden/test_hidden.py::test_first_hundred_{i}",
                         "outcome": "skipped", "verdict": "timeout", "held_message": None,
                         "message": f"Case {i}: {NOT_RUN}"} for i in range(6)]
    return report


def _graded(world: World, report: dict[str, Any]) -> int:
    sid = int(world.submit(world.ada, REFERENCE).json()["id"])
    offer = claim(world.client)
    assert offer is not None
    r = world.client.post(f"/api/runner/jobs/{offer['job_id']}/result",
                          content=JobOutcome.model_validate({"report": report}).model_dump_json(),
                          headers={**RUNNER, "X-Job-Token": offer["token"],
                                   "Content-Type": "application/json"})
    assert r.status_code == 204, r.text
    return sid


def test_the_staff_read_the_whole_message_and_unrun_tests_are_one_row(world: World,
                                                                      engine: Engine) -> None:
    sid = _graded(world, _report())
    staff = browser(world, "prof@uni.edu", "prof-pass-4821").get(f"/s/{sid}").text
    assert WHOLE in staff and "The whole message (staff only" in staff
    mine = browser(world).get(f"/s/{sid}").text
    assert WHOLE not in mine and WRITTEN in mine
    for page in (staff, mine):
        assert page.lower().count("not run: an earlier test") == 1 and "6 tests not run:" in page
        assert "test_<wbr>first_<wbr>hundred_<wbr>0" in page  # breaks between words only
        assert ".: not run" not in page


def test_rows_and_names_as_the_page_and_the_cli_show_them() -> None:
    rows = report_text.test_rows(_report()["tests"])
    assert [len(r["names"]) for r in rows] == [1, 6] and rows[1]["reason"] == NOT_RUN
    assert str(report_text.breakable("a/test_x.py::t<b>")) == "a/<wbr>test_<wbr>x.<wbr>py::<wbr>t&lt;b&gt;"
    table = render._rows(GradeReport.model_validate(_report()).tests)
    assert len(table) == 2 and table[1][1].startswith("6 tests not run: test_first_hundred_0, ")
    assert table[1][3] == NOT_RUN


def test_the_csv_says_times_with_their_zone_and_downloads_come_as_files(world: World) -> None:
    sid = _graded(world, sample_report())
    A = "/api/courses/th/assignments/t1-multiprocessing"
    r = world.get(world.prof, f"{A}/grades.csv")
    assert r.headers["content-disposition"] == 'attachment; filename="t1-multiprocessing-grades.csv"'
    rows = {row["email"]: row for row in csv.DictReader(io.StringIO(r.text))}
    assert rows["ada@uni.edu"]["submitted_at"].endswith("+00:00")
    assert rows["ada@uni.edu"]["version"] == world.get(world.prof, A).json()["version"]
    assert rows["bob@uni.edu"]["submitted_at"] == "" and rows["ada@uni.edu"]["late_days_used"] == ""
    got = world.get(world.prof, f"/api/submissions/{sid}/gradescope.json")
    assert got.status_code == 200 and got.json()["score"] is not None
    assert got.headers["content-disposition"] == f'attachment; filename="results-{sid}.json"'


def test_the_late_policy_is_said_in_full_before_the_deadline(world: World) -> None:
    r = world.client.patch("/api/courses/th/assignments/t1-multiprocessing", headers=world.prof,
                           json={"late_policy": "penalty", "late_penalty": 0.25,
                                 "deadline": "2099-01-01T00:00:00+00:00"})
    assert r.status_code == 200, r.text
    page = browser(world).get("/c/th/t1-multiprocessing").text
    assert "Due 2099-01-01 00:00 UTC (late submissions lose 25 % of their points)" in page


def test_the_deadline_picker_takes_a_zone_and_keeps_a_refused_value(world: World) -> None:
    from tests.server.test_pages import csrf

    T1 = "/c/th/t1-multiprocessing"
    prof = browser(world, "prof@uni.edu", "prof-pass-4821")
    page = prof.get(f"{T1}/manage").text
    assert 'type="datetime-local" name="deadline_local"' in page and "<option>Europe/Berlin" in page
    form = {"csrf_token": csrf(page), "late_policy": "accept", "late_penalty": "0",
            "quota_count": "5", "quota_window_min": "60", "speedup_min": "1",
            "speedup_full": "1.7"}
    r = prof.post(f"{T1}/manage/policy", data={**form, "deadline_local": "2026-12-24T18:00",
                                                "deadline_zone": "Europe/Berlin"})
    assert r.status_code == 303, r.text
    api = world.get(world.prof, "/api/courses/th/assignments/t1-multiprocessing").json()
    assert api["deadline"].startswith("2026-12-24T17:00:00")
    assert 'name="deadline_local" value="2026-12-24T17:00"' in prof.get(f"{T1}/manage").text
    refused = prof.post(f"{T1}/manage/policy", data={
        **form, "deadline_local": "9999-12-31T23:59", "deadline_zone": "Etc/GMT+12"})
    assert refused.status_code == 422 and "out of range" in refused.text
    assert 'name="deadline_local" value="9999-12-31T23:59"' in refused.text
    assert "<option selected>Etc/GMT+12</option>" in refused.text
    unknown = prof.post(f"{T1}/manage/policy", data={
        **form, "deadline_local": "2026-12-24T18:00", "deadline_zone": "Mars/Olympus"})
    assert unknown.status_code == 422 and "no time zone &#39;Mars/Olympus&#39;" in unknown.text
    assert world.get(world.prof, "/api/courses/th/assignments/t1-multiprocessing").json()[
        "deadline"].startswith("2026-12-24T17:00:00")  # nothing stored by a refusal
