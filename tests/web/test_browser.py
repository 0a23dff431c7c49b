"""A real browser (Debian's Chromium driven by Playwright) against a real platform and runner."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.server.conftest import REFERENCE
from tests.server.live import Platform, wait_until
from tests.server.test_pages import _t1_zip
from tests.web.conftest import SHOTS

pytestmark = [pytest.mark.browser, pytest.mark.slow]
WRONG = (Path(__file__).resolve().parents[1] / "fixtures" / "reports" / "t1_wrong.py").read_bytes()


def test_a_student_submits_and_watches_it_graded_and_ranked(  # type: ignore[no-untyped-def]
        platform: Platform, page, tmp_path: Path) -> None:
    p = platform
    code = p.course("treasure-hunt/t1-multiprocessing")
    p.start_runner("cpu-1", "cpu,mpi")
    wait_until("t1 to validate", lambda: p.get(
        p.prof, "/api/courses/c/assignments/t1-multiprocessing")["validation"] == "ready", 120)

    page.goto(f"{p.base}/register?code={code}")
    page.fill("input[name=email]", "ada@uni.edu")
    page.fill("input[name=name]", "Ada")
    page.fill("input[name=alias]", "ada")
    page.fill("input[name=password]", "adapass-4417")
    page.click("button[type=submit]")
    page.click("text=Treasure hunt 1")
    page.screenshot(path=SHOTS / "assignment.png", full_page=True)

    good, bad = tmp_path / "solution.py", tmp_path / "wrong" / "solution.py"
    good.write_bytes(REFERENCE)
    bad.parent.mkdir()
    bad.write_bytes(WRONG)
    page.set_input_files("input[type=file]", str(good))
    assert "ready" in page.inner_text(".checks")  # checked in the page before the upload
    page.click("text=Submit for grading")
    page.wait_for_url("**/s/*")
    assert page.inner_text("#live .status") in ("queued", "running")
    page.wait_for_selector(".verdict-passed", timeout=180_000)  # live: no reload by the test
    page.screenshot(path=SHOTS / "report.png", full_page=True)
    assert "Speedup" in page.inner_text(".speedup")
    assert page.locator("svg.plot").count() == 1

    page.click("text=Treasure hunt 1")
    page.set_input_files("input[type=file]", str(bad))
    page.click("text=Submit for grading")
    page.wait_for_selector(".verdict-failed", timeout=120_000)
    assert "wrong answer" in page.inner_text("table.tests")

    # A practice run with a profile: "Try on the runner" beside Submit; it never counts.
    page.click("text=Treasure hunt 1")
    page.set_input_files("input[type=file]", str(good))
    page.check("input[name=profile]")
    page.click("text=Try on the runner (not graded)")
    page.wait_for_url("**/p/*")
    page.wait_for_selector("#profile svg.timeline", timeout=120_000)  # the page refreshes itself
    assert "Practice: not graded" in page.inner_text("main")
    assert "your solution.py" in page.inner_text("#profile")
    assert page.locator("#profile svg.flame rect.flame-own").count() >= 1  # the flame graph
    page.screenshot(path=SHOTS / "practice.png", full_page=True)

    page.click("text=Treasure hunt 1")
    page.click("text=Leaderboard")
    you = page.locator("tr.you")
    assert "ada (you)" in you.inner_text()
    page.set_viewport_size({"width": 390, "height": 844})  # a phone
    page.screenshot(path=SHOTS / "leaderboard-phone.png", full_page=True)

    # The instructor, in a browser of their own: import a new version, watch it validate, regrade.
    prof = _instructor(page, p.base)
    # How the class is doing: ada's two gradings, the reference (passed) and a wrong answer.
    prof.goto(f"{p.base}/c/c/t1-multiprocessing/stats")
    assert "1/1 (100 %)" in prof.inner_text("#tests")  # first try passed, latest not
    assert "0/1 (0 %)" in prof.inner_text("#tests")
    assert prof.locator("svg.plot").count() == 4  # scores, speedups, scaling curve, per hour
    assert "best passed submission (1)" in prof.inner_text("#speedups")
    assert "middle half" in prof.inner_text("#speedups")  # the class's scaling curve, 1 and 2
    days = prof.inner_text("#when")  # the gradings so far, all queued today
    assert "Queue wait and grading time, per day" in days and "grading p95" in days
    prof.screenshot(path=SHOTS / "stats.png", full_page=True)
    prof.goto(f"{p.base}/c/c/-/stats")
    assert "1/1" in prof.inner_text("#assignments") and "Nobody" in prof.inner_text("#watchlist")
    prof.screenshot(path=SHOTS / "course-stats.png", full_page=True)
    prof.goto(f"{p.base}/")
    prof.click("text=Manage the course")
    package = tmp_path / "t1.zip"
    package.write_bytes(_t1_zip(b'"1.0.1"'))
    prof.set_input_files("input[name=package]", str(package))
    prof.click("button:has-text('Import')")
    assert "Imported t1-multiprocessing 1.0.1: validating" in prof.inner_text("[role=status]")
    prof.click("a[href$='/t1-multiprocessing/manage']")
    prof.click("button:has-text('Regrade all')")
    assert "2 submission(s) queued for regrading" in prof.inner_text("[role=status]")
    prof.screenshot(path=SHOTS / "manage.png", full_page=True)
    prof.goto(f"{p.base}/fleet")
    assert "cpu-1" in prof.inner_text("main") and "live" in prof.inner_text("main")
    prof.screenshot(path=SHOTS / "fleet.png", full_page=True)
    _graded_by_hand(page, p, code)


def _graded_by_hand(page, p: Platform, code: str) -> None:  # type: ignore[no-untyped-def]
    """A TA grades two students by a rubric item and a comment on a line each; the instructor
    releases; ada reads the comment under its line."""
    bob = p.student("bob", code)
    p.submit(bob, "t1-multiprocessing", REFERENCE + b"\n# bob's\n")
    p.student("tina", code)
    r = p.http.put("/api/courses/c/members/tina@uni.edu", json={"role": "ta"}, headers=p.prof)
    assert r.status_code == 200, r.text
    r = p.http.put("/api/courses/c/assignments/t1-multiprocessing/rubric",
                   json={"points": 10}, headers=p.prof)
    assert r.status_code == 200, r.text
    ta = page.context.browser.new_context().new_page()
    ta.goto(f"{p.base}/login")
    ta.fill("input[name=email]", "tina@uni.edu")
    ta.fill("input[name=password]", "studentpass1")
    ta.click("button[type=submit]")
    ta.goto(f"{p.base}/c/c/t1-multiprocessing/grading")
    ta.fill("input[name=title]", "uses a Pool")
    ta.fill("form[action$='/grading/items'] input[name=points]", "6")
    ta.fill("textarea[name=description]", "The statement asks for a pool of processes.")
    ta.click("button:has-text('Add the item')")
    ta.screenshot(path=SHOTS / "grading.png", full_page=True)
    for student in ("ada", "bob"):
        ta.click("button:has-text('Grade the next student')")
        ta.wait_for_url("**/grading/*")
        ta.click("button:has-text('uses a Pool')")
        if student == "ada":  # a click on the line's number starts the comment there
            ta.click("button.line-number[data-file='solution.py'][data-line='2']")
            assert ta.input_value("input[name=line]") == "2"
            assert ta.input_value("select[name=file]") == "solution.py"
        else:  # the line typed, as without JavaScript
            ta.select_option("select[name=file]", "solution.py")
            ta.fill("input[name=line]", "2")
        ta.fill("textarea[name=body]", f"Why import this here? ({student})")
        ta.click("button:has-text('Add the comment')")
        if student == "ada":
            ta.screenshot(path=SHOTS / "grade.png", full_page=True)
        ta.click("button:has-text('Done')")
        ta.goto(f"{p.base}/c/c/t1-multiprocessing/grading")
    assert ta.locator("text=2 of 2 students graded").count() == 1
    prof = _instructor(page, p.base)
    prof.goto(f"{p.base}/c/c/t1-multiprocessing/grading")
    prof.click("button:has-text('Release the manual grades')")
    prof.click("button:has-text('Release 2 grades')")  # it asks first, saying how many
    page.goto(f"{p.base}/c/c/t1-multiprocessing")
    page.click("text=Graded by hand: your feedback")
    line = page.locator("tr[id='L-solution.py-2']")
    assert "Why import this here? (" in line.inner_text()
    assert "6 of 10 points" in page.inner_text("main")
    page.screenshot(path=SHOTS / "feedback.png", full_page=True)


def test_an_lms_launch_the_course_board_and_a_similarity_report(  # type: ignore[no-untyped-def]
        platform: Platform, page, tmp_path: Path) -> None:
    """A student arrives from the (stand-in) LMS, submits, and the grade reaches its gradebook;
    the course board shows the treasure hunt; the instructor's similarity run finds the one
    disguised copy, side by side."""
    from tests.server.lms import StandInLms
    from tests.similarity_corpus import HONEST, disguise, honest

    p = platform
    code = p.course("treasure-hunt/t1-multiprocessing")
    p.start_runner("cpu-1", "cpu,mpi")
    wait_until("t1 to validate", lambda: p.get(
        p.prof, "/api/courses/c/assignments/t1-multiprocessing")["validation"] == "ready", 120)
    lms = StandInLms(tool=p.base)
    r = p.http.post("/api/courses/c/lti/platforms", json=lms.registration(), headers=p.prof)
    assert r.status_code == 201, r.text
    lms.tool_jwks = p.http.get("/lti/jwks").json()
    try:
        # Two students by join code: one hands in honest code, the other its disguised copy.
        original = honest()[HONEST.index("getopt.py")]
        ada, bob = p.student("ada", code), p.student("bob", code)
        p.submit(ada, "t1-multiprocessing", original.encode())
        p.submit(bob, "t1-multiprocessing", disguise(original).encode())

        page.goto(f"{lms.url}/start?target={p.base}/c/c/t1-multiprocessing")
        page.wait_for_url("**/c/c/t1-multiprocessing")  # logged in, no join code asked
        solution = tmp_path / "solution.py"
        solution.write_bytes(REFERENCE)
        page.set_input_files("input[type=file]", str(solution))
        page.click("text=Submit for grading")
        page.wait_for_selector(".verdict-passed", timeout=180_000)
        wait_until("the grade in the LMS gradebook", lambda: lms.gradebook, 60)
        (_, user), posted = next(iter(lms.gradebook.items()))
        assert user == "student-1" and posted["scoreGiven"] > 0
        page.goto(f"{p.base}/c/c/-/board")
        assert "(you)" in page.inner_text("tr.you")
        page.screenshot(path=SHOTS / "course-board.png", full_page=True)

        prof = _instructor(page, p.base)
        prof.goto(f"{p.base}/c/c/t1-multiprocessing/similarity")
        prof.click("button:has-text('Compare')")
        prof.wait_for_selector("table.similar-pairs", timeout=300_000)  # the page reloads itself
        assert prof.locator("table.similar-pairs tbody tr").count() == 1
        assert "bob@uni.edu" in prof.inner_text("table.similar-pairs")
        prof.click("text=Side by side")
        assert prof.locator(".side-by-side .match").count() > 20
        prof.screenshot(path=SHOTS / "similarity-pair.png", full_page=True)
    finally:
        lms.close()


def _instructor(page, base: str):  # type: ignore[no-untyped-def]
    """The instructor, logged in in a browser context of their own."""
    prof = page.context.browser.new_context().new_page()
    prof.goto(f"{base}/login")
    prof.fill("input[name=email]", "prof@uni.edu")
    prof.fill("input[name=password]", "prof-pass-4821")
    prof.click("button[type=submit]")
    return prof
