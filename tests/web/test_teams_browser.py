"""Two students form a team in a real browser (Debian's Chromium, Playwright) on a live
platform: ada creates it on the assignment page and reads its join code, bob joins with it and
submits; ada opens the team's report and finds the team's one row on the board. The test plays
the runner (the grading itself is the other browser test's)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.server.conftest import REFERENCE, RUNNER, claim, finish_validation
from tests.server.live import Platform
from tests.server.reports import sample_report
from tests.web.conftest import SHOTS

pytestmark = [pytest.mark.browser, pytest.mark.slow]
T1 = "t1-multiprocessing"


def _sign_in(page: Any, base: str, email: str) -> None:
    page.goto(f"{base}/login")
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", "studentpass1")
    page.click("button[type=submit]")


def test_two_students_form_a_team_and_share_its_report_and_board_row(  # type: ignore[no-untyped-def]
        platform: Platform, page, tmp_path) -> None:
    p = platform
    code = p.course(f"treasure-hunt/{T1}")
    finish_validation(p.http, sessions=p.sessions)
    r = p.http.patch(f"/api/courses/c/assignments/{T1}", json={"team_max": 2, "team_min": 2},
                     headers=p.prof)
    assert r.status_code == 200, r.text
    for name in ("ada", "bob"):
        p.student(name, code)

    _sign_in(page, p.base, "ada@uni.edu")
    page.goto(f"{p.base}/c/c/{T1}")
    page.fill("input[name=name]", "Forks")
    page.click("button:has-text('Create a team')")
    card = page.inner_text("#team")
    assert "Forks" in card and "1 of 2–2" in card, card
    join_code = page.inner_text("#team code")
    page.screenshot(path=SHOTS / "team.png", full_page=True)

    bob = page.context.browser.new_context().new_page()
    _sign_in(bob, p.base, "bob@uni.edu")
    bob.goto(f"{p.base}/c/c/{T1}")
    bob.fill("input[name=code]", join_code)
    bob.click("button:has-text('Join')")
    assert "ada, bob (2 of 2–2)" in bob.inner_text("#team")
    solution = tmp_path / "solution.py"
    solution.write_bytes(REFERENCE)
    bob.set_input_files("input[type=file]", str(solution))
    bob.click("text=Submit for grading")
    bob.wait_for_url("**/s/*")
    at = bob.url

    offer = claim(p.http, sessions=p.sessions)
    assert offer is not None and offer["job"] is not None, offer
    r = p.http.post(f"/api/runner/jobs/{offer['job_id']}/result",
                    json={"report": sample_report(median=1.7, lo=1.6, hi=1.8)},
                    headers={**RUNNER, "X-Job-Token": offer["token"]})
    assert r.status_code == 204, r.text

    page.goto(at)  # the team's submission, bob's upload: ada reads its report
    page.wait_for_selector(".verdict-passed", timeout=30_000)
    page.goto(f"{p.base}/c/c/{T1}/leaderboard")
    you = page.locator("tr.you")
    assert "Forks: ada, bob" in you.inner_text(), page.inner_text("main")
    page.screenshot(path=SHOTS / "team-board.png", full_page=True)
