"""An instructor's first term in a real browser (Debian's Chromium, Playwright) on a live
platform: the deadline set in Berlin time reads back in UTC; the staff read a hidden test's
whole message in the report; a student's bell shows a grade that took long, the preferences
page saves; the late-day confirmation appears before a late upload. The test plays the runner."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runners.protocol import JobOutcome
from tests.server.conftest import REFERENCE, RUNNER, claim, finish_validation
from tests.server.live import Platform
from tests.server.reports import sample_report
from tests.web.conftest import SHOTS

pytestmark = [pytest.mark.browser, pytest.mark.slow]
T1 = "t1-multiprocessing"
WHOLE = "Ten numbers: assert 11774 == 9370"


def _sign_in(page: Any, base: str, email: str, password: str = "studentpass1") -> None:
    page.goto(f"{base}/login")
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")


def test_a_first_term_in_the_browser(platform: Platform, page, tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = platform
    code = p.course(f"treasure-hunt/{T1}")
    finish_validation(p.http, sessions=p.sessions)
    ada = p.student("ada", code)
    prof = page.context.browser.new_context().new_page()
    _sign_in(prof, p.base, "prof@uni.edu", "prof-pass-4821")

    # The deadline, picked in Berlin time, stored and shown in UTC.
    prof.goto(f"{p.base}/c/c/{T1}/manage")
    prof.fill("input[name=deadline_local]", "2026-12-24T18:00")
    prof.select_option("select[name=deadline_zone]", "Europe/Berlin")
    prof.click("form[action$='/manage/policy'] button[type=submit]")
    assert prof.input_value("input[name=deadline_local]") == "2026-12-24T17:00"
    assert "now 2026-12-24 17:00 UTC" in prof.inner_text("main")

    # A grading that took long (a failing hidden test), told in the student's bell.
    r = p.http.put("/api/notifications/settings", headers=ada, json={"grade_wait_s": 0})
    assert r.status_code == 200, r.text
    sid = p.http.post(f"/api/courses/c/assignments/{T1}/submissions", headers=ada,
                      files=[("files", ("solution.py", REFERENCE))]).json()["id"]
    report = sample_report(passed=False)
    report["tests"][0].update(message="Ten numbers: wrong answer", held_message=WHOLE)
    offer = claim(p.http, sessions=p.sessions)
    assert offer is not None and offer["job"] is not None
    r = p.http.post(f"/api/runner/jobs/{offer['job_id']}/result",
                    content=JobOutcome.model_validate({"report": report}).model_dump_json(),
                    headers={**RUNNER, "X-Job-Token": offer["token"],
                             "Content-Type": "application/json"})
    assert r.status_code == 204, r.text
    prof.goto(f"{p.base}/s/{sid}")
    assert WHOLE in prof.inner_text("details.whole-message")  # the staff read it whole
    _sign_in(page, p.base, "ada@uni.edu")
    page.goto(f"{p.base}/")
    assert page.get_attribute("a.bell", "aria-label") == "notifications: 1 unread"
    page.click("a.bell")
    page.click(f"a:has-text('submission {sid} graded')")
    page.wait_for_url(f"**/s/{sid}")
    assert WHOLE not in page.inner_text("main")
    assert page.get_attribute("a.bell", "aria-label") == "notifications: 0 unread"
    page.goto(f"{p.base}/notifications")
    page.select_option("select[name=email-announcement]", "digest")
    page.click("form[action='/notifications/settings'] button[type=submit]")
    assert page.locator("text=Saved.").count() == 1
    assert page.input_value("select[name=email-announcement]") == "digest"
    page.screenshot(path=SHOTS / "notifications.png", full_page=True)

    # Late days: the page says what an upload spends and asks before it is sent.
    assert p.http.put("/api/courses/c/late-days", headers=p.prof,
                      json={"pool": 3}).status_code == 200
    late = (datetime.now(UTC) - timedelta(hours=26)).isoformat()
    assert p.http.patch(f"/api/courses/c/assignments/{T1}", headers=p.prof,
                        json={"deadline": late}).status_code == 200
    page.goto(f"{p.base}/c/c/{T1}")
    said = page.inner_text("#late-days")
    assert "uses 2 of your 3 remaining late days; after that the late penalty applies" in said
    solution = tmp_path / "solution.py"
    solution.write_bytes(REFERENCE)
    page.set_input_files("input[type=file]", str(solution))
    page.check("input[name=spend_late_days]")
    page.screenshot(path=SHOTS / "late-days.png", full_page=True)
    page.click("text=Submit for grading")
    page.wait_for_url("**/s/*")
    page.goto(f"{p.base}/")
    assert "Late days: 1 of 3 left" in page.inner_text("main")
