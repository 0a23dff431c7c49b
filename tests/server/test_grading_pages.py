"""Grading by hand in the browser's pages (forms, CSRF, redirects): a TA writes an item, takes
the next student, applies it and comments on a line; an item's change says how many grades it
reaches before it is saved; the instructor releases; the student reads the comment under its
line and asks for a regrade; the TA answers it and the grade follows."""

from __future__ import annotations

import re

from sqlalchemy import Engine

from tests.server.conftest import World
from tests.server.test_manual_grading import _graded, _tas
from tests.server.test_pages import browser, csrf

G = "/c/th/t1-multiprocessing/grading"
M = "/c/th/t1-multiprocessing/manage"  # the offering's settings


def _post(b, page: str, url: str, **data: str):  # type: ignore[no-untyped-def]
    return b.post(url, data={"csrf_token": csrf(b.get(page).text), **data})


def test_a_ta_grades_in_the_pages_and_the_student_reads_it(world: World, engine: Engine) -> None:
    _graded(world)
    _tas(world, engine, 1)
    ta = browser(world, "ta0@uni.edu", "ta-pass-48213")
    prof = browser(world, "prof@uni.edu", "prof-pass-4821")
    assert browser(world).get(G).status_code == 403  # a student

    r = _post(prof, G, G + "/rules", points="10", weight="1", regrade_limit="2")
    assert r.status_code == 303, r.text
    r = _post(prof, M, M + "/hidden-tests", shown="after_deadline")  # late work earns points
    assert r.status_code == 422 and "resubmit for points" in r.text, r.text
    assert world.client.patch("/api/courses/th/assignments/t1-multiprocessing",
                              json={"late_policy": "reject"}, headers=world.prof).status_code == 200
    r = _post(prof, M, M + "/hidden-tests", shown="after_deadline")
    assert r.status_code == 303 and 'value="after_deadline" selected' in prof.get(M).text
    r = _post(ta, G, G + "/rules", points="50", weight="1", regrade_limit="2")
    assert r.status_code == 403 and "set the manual points" in r.text
    r = _post(ta, G, G + "/items", title="uses a Pool", points="6", group="code",
              description="The statement asks for one.")
    assert r.status_code == 303, r.text
    item = re.search(r'/grading/items/(\d+)', ta.get(G).text)
    assert item is not None
    r = _post(ta, G, G + "/next")
    assert r.status_code == 303 and re.search(r"/grading/\d+$", r.headers["location"])
    page_url = r.headers["location"]
    page = ta.get(page_url).text
    assert "uses a Pool" in page and 'id="L-solution.py-1"' in page
    beside = page[page.index('class="report-beside"'):page.index('id="rubric"')]
    assert "90 / 100 points" in beside and "<svg" in beside  # the report, its scaling curve
    who = "ada" if "ada@uni.edu" in page else "bob"
    r = _post(ta, page_url, f"{page_url}/items/{item.group(1)}", applied="yes")
    assert r.status_code == 303
    r = _post(ta, page_url, f"{page_url}/comments", file="solution.py", line="2",
              body="Why import this here?")
    assert r.status_code == 303 and r.headers["location"].endswith("#L-solution.py-2")
    r = _post(ta, page_url, f"{page_url}/comments", file="solution.py", line="9999", body="x")
    assert r.status_code == 422 and "has lines 1 to" in r.text
    assert "spoofed" not in ta.get(page_url + "?error=spoofed").text
    r = _post(ta, page_url, f"{page_url}/done", done="yes")
    # Done opens the next student's grade (the other of the two), then the queue: all graded.
    assert r.status_code == 303 and re.search(r"/grading/\d+$", r.headers["location"])
    assert r.headers["location"] != page_url
    nxt = r.headers["location"]
    r = _post(ta, nxt, f"{nxt}/done", done="yes")
    assert r.status_code == 303 and r.headers["location"].endswith("/grading?all=1")
    assert "All graded" in ta.get(r.headers["location"]).text
    assert ">done<" in ta.get(G).text

    # A change says first how many grades it reaches.
    r = _post(ta, G, f"{G}/items/{item.group(1)}", title="uses a Pool", points="8")
    assert r.status_code == 200 and "This changes 1 grade" in r.text
    r = _post(ta, G, f"{G}/items/{item.group(1)}", title="uses a Pool", points="8",
              confirm="yes")
    assert r.status_code == 303

    student = browser(world, f"{who}@uni.edu")
    assert student.get("/c/th/t1-multiprocessing/feedback").status_code == 404
    asked = _post(prof, G, G + "/release", released="yes")  # asks first, saying how many
    assert asked.status_code == 200 and "Release 2 grades?" in asked.text
    assert student.get("/c/th/t1-multiprocessing/feedback").status_code == 404
    assert _post(prof, G, G + "/release", released="yes", confirm="yes").status_code == 303
    assert "Graded by hand: your feedback" in student.get("/c/th/t1-multiprocessing").text
    fb = student.get("/c/th/t1-multiprocessing/feedback").text
    assert "<strong>8</strong> of 10 points" in fb and "uses a Pool" in fb
    line2 = fb[fb.index('id="L-solution.py-2"'):fb.index('id="L-solution.py-3"')]
    assert "Why import this here?" in line2  # the comment under its line
    r = _post(student, "/c/th/t1-multiprocessing/feedback",
              "/c/th/t1-multiprocessing/feedback/regrade", about=f"item:{item.group(1)}",
              reason="I use a Pool on line 5.")
    assert r.status_code == 303, r.text
    assert 'value="test:hidden/test_hidden.py::test_x"' in student.get(
        "/c/th/t1-multiprocessing/regrade").text  # a test may be asked about too

    listed = ta.get("/c/th/-/regrades").text
    rid = re.search(r'action="/c/th/-/regrades/(\d+)"', listed)
    assert rid is not None and "I use a Pool on line 5." in listed
    r = _post(ta, "/c/th/-/regrades", f"/c/th/-/regrades/{rid.group(1)}", answer="Indeed.",
              change="remove")
    assert r.status_code == 303
    fb = student.get("/c/th/t1-multiprocessing/feedback").text
    assert "<strong>0</strong> of 10 points" in fb and "Answer: Indeed." in fb
