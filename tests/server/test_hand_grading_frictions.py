"""Hand grading as a first term met it, on SQLite and PostgreSQL: a warning where the rubric's
items add up to more than hand grading may give; the code highlighted on the server, each line
number a button that starts a comment, hostile code shown as text; the release of grades by
hand tells each student."""

from __future__ import annotations

from sqlalchemy import Engine

from tests.server.conftest import RUNNER, World, claim
from tests.server.reports import sample_report
from tests.server.test_manual_grading import A
from tests.server.test_pages import browser, csrf

HOSTILE = (b'import os\n\n\ndef parallel_sum(n, chunks, workers=2):\n'
           b'    """<script>alert(1)</script>"""\n    return 0.0  # </pre><b>\n')


def _graded_hostile(world: World) -> int:
    from runners.protocol import JobOutcome

    sid = int(world.submit(world.ada, HOSTILE).json()["id"])
    offer = claim(world.client)
    assert offer is not None
    r = world.client.post(f"/api/runner/jobs/{offer['job_id']}/result",
                          content=JobOutcome.model_validate({"report": sample_report()})
                          .model_dump_json(),
                          headers={**RUNNER, "X-Job-Token": offer["token"],
                                   "Content-Type": "application/json"})
    assert r.status_code == 204, r.text
    return sid


def test_items_beyond_the_manual_most_are_warned_of(world: World) -> None:
    r = world.post(world.prof, f"{A}/rubric/items", json={"title": "uses a Pool", "points": 10})
    assert r.status_code == 201, r.text
    assert r.json()["warning"] == ("the rubric's items add up to 10 points but hand grading "
                                   "may give at most 0: raise \"manual points at most\", or the "
                                   "points beyond it count for nothing")
    assert world.get(world.prof, f"{A}/rubric").json()["warning"] == r.json()["warning"]
    page = browser(world, "prof@uni.edu", "prof-pass-4821").get(
        "/c/th/t1-multiprocessing/grading").text
    assert "the rubric&#39;s items add up to 10 points" in page
    r = world.client.put(f"{A}/rubric", headers=world.prof, json={"points": 10})
    assert r.status_code == 200 and r.json()["warning"] is None


def test_the_code_is_highlighted_escaped_and_its_lines_start_comments(world: World) -> None:
    _graded_hostile(world)
    assert world.client.put(f"{A}/rubric", headers=world.prof, json={"points": 10}).status_code \
        == 200
    r = world.post(world.prof, f"{A}/grading/next", json={})
    assert r.status_code == 200, r.text
    page = browser(world, "prof@uni.edu", "prof-pass-4821").get(
        f"/c/th/t1-multiprocessing/grading/{r.json()['id']}").text
    assert "<script>alert(1)</script>" not in page and "</pre><b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert '<span class="k">def</span>' in page and '<span class="nf">parallel_sum</span>' in page
    assert ('data-file="solution.py" data-line="4" aria-label="comment on line 4 of '
            'solution.py">4</button>') in page
    assert 'id="line-comment"' in page  # the form the line numbers fill


def test_releasing_grades_by_hand_tells_each_student(world: World, engine: Engine) -> None:
    _graded_hostile(world)
    world.client.put(f"{A}/rubric", headers=world.prof, json={"points": 10})
    g = world.post(world.prof, f"{A}/grading/next", json={}).json()
    assert world.post(world.prof, f"{A}/grading/{g['id']}/done", json={}).status_code == 200
    prof = browser(world, "prof@uni.edu", "prof-pass-4821")
    page = prof.get("/c/th/t1-multiprocessing/grading").text
    asked = prof.post("/c/th/t1-multiprocessing/grading/release",
                      data={"csrf_token": csrf(page), "released": "yes"})
    assert asked.status_code == 200 and "Release 1 grade?" in asked.text
    assert world.get(world.ada, "/api/notifications").json()["unread"] == 0
    done = prof.post("/c/th/t1-multiprocessing/grading/release",
                     data={"csrf_token": csrf(page), "released": "yes", "confirm": "yes"})
    assert done.status_code == 303
    (n,) = world.get(world.ada, "/api/notifications").json()["notifications"]
    assert n["kind"] == "manual_released" and n["link"] == "/c/th/t1-multiprocessing/feedback"
