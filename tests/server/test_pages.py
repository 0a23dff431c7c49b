"""The web pages as a browser meets them (no JavaScript here; tests/web drives a real browser)."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlalchemy import Engine, select

from runners.measure import credit
from runners.protocol import GradeReport
from server.db import session_factory
from server.models import Enrollment, Submission, User
from server.services.grades import grading
from tests.server.conftest import (
    REFERENCE,
    REPO_ROOT,
    World,
    finish_validation,
    zip_of,
)
from tests.server.reports import sample_report, store

T1 = "/c/th/t1-multiprocessing"
XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def browser(world: World, email: str = "ada@uni.edu", password: str = "studentpass1") -> TestClient:
    b = TestClient(world.client.app, follow_redirects=False)
    r = b.post("/login", data={"email": email, "password": password, "next": "/",
                               "csrf_token": csrf(b.get("/login").text)})
    assert r.status_code == 303 and r.headers["location"] == "/", r.text
    return b


def csrf(page: str) -> str:
    m = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert m, "the page has no CSRF field"
    return m.group(1)


def test_pages_need_a_login_and_a_bad_password_is_said(world: World) -> None:
    anon = TestClient(world.client.app, follow_redirects=False)
    r = anon.get(T1)
    assert r.status_code == 303 and r.headers["location"] == "/login?next=/c/th/t1-multiprocessing"
    r = anon.post("/login", data={"email": "ada@uni.edu", "password": "nope-nope",
                                  "csrf_token": csrf(anon.get("/login").text)})
    assert r.status_code == 403 and "wrong email or password" in r.text
    assert "<h1>Log in</h1>" in r.text


def test_register_then_see_the_course(world: World) -> None:
    b = TestClient(world.client.app, follow_redirects=False)
    r = b.post("/register", data={"email": "cy@uni.edu", "name": "Cy", "password": "cypass-8812",
                                   "join_code": world.join_code, "alias": "cy",
                                   "csrf_token": csrf(b.get("/register").text)})
    assert r.status_code == 303
    home = b.get("/").text
    assert "Treasure hunt" in home and 'href="/c/th/t1-multiprocessing"' in home
    r = b.post("/register", data={"email": "dee@uni.edu", "name": "Dee", "password": "deepass-7719",
                                   "join_code": "wrong-code", "csrf_token": csrf(b.get("/").text)})
    assert r.status_code == 404 and "join code" in r.text
    r = b.post("/register", data={"email": "eve@uni.edu", "name": XSS, "password": "evepass123",
                                   "join_code": world.join_code, "alias": XSS,
                                   "csrf_token": csrf(b.get("/").text)})
    assert r.status_code == 422 and "alias: use letters, digits" in r.text  # plain words
    assert "<script>alert" not in r.text and "&lt;script&gt;" in r.text  # echoed, escaped


def test_upload_needs_the_csrf_token_and_then_shows_the_submission(world: World) -> None:
    b = browser(world)
    page = b.get(T1).text
    files = {"files": ("solution.py", REFERENCE)}
    r = b.post(f"{T1}/submit", files=files)
    assert r.status_code == 403 and "CSRF" in r.text
    r = b.post(f"{T1}/submit", files=files, data={"csrf_token": "forged"})
    assert r.status_code == 403
    r = b.post(f"{T1}/submit", files=files, data={"csrf_token": csrf(page)})
    assert r.status_code == 303 and r.headers["location"].startswith("/s/")
    sub = b.get(r.headers["location"]).text
    assert 'class="status">queued<' in sub and "on the cpu queue" in sub
    assert "waiting for a runner" in sub  # no runner is live in this test


def test_refused_uploads_say_why_and_escape_the_name(world: World) -> None:
    b = browser(world)
    token = csrf(b.get(T1).text)
    r = b.post(f"{T1}/submit", data={"csrf_token": token},
               files=[("files", ("solution.py", REFERENCE)), ("files", (f"{XSS}.py", b"x = 1\n"))])
    assert r.status_code == 422 and "<img src=x" not in r.text
    assert "&lt;img src=x onerror=alert(1)&gt;.py&#39; is not a file" in r.text
    r = b.post(f"{T1}/submit", data={"csrf_token": token}, files={"files": ("solution.py", b"")})
    assert r.status_code == 422 and "empty" in r.text


def test_report_alias_and_statement_are_escaped(world: World, engine: Engine) -> None:
    # A hostile statement from an instructor's package, printed output and test messages from a
    # submission, and a hostile alias: none of it becomes markup.
    folder = REPO_ROOT / "assignments/treasure-hunt/t1-multiprocessing"
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    files["assignment.toml"] = files["assignment.toml"].replace(b'"1.1.0"', b'"1.1.1"')
    files["statement.md"] = f"# Title\n\n{XSS}\n\n[link](javascript:alert(1))\n".encode()
    r = world.post(world.prof, "/api/courses/th/assignments/upload",
                   files={"package": ("p.zip", zip_of(files))})
    assert r.status_code == 201, r.text
    finish_validation(world.client)
    sid = world.submit(world.ada, REFERENCE).json()["id"]
    report = sample_report()
    report["output_excerpt"] = XSS
    report["tests"][0]["message"] = XSS
    report["tests"][0]["name"] = XSS
    with session_factory(engine)() as s:
        sub = s.get(Submission, sid)
        assert sub is not None
        grading.store_report(session=s, sub=sub, report=GradeReport.model_validate(report))
        s.commit()
    b = browser(world)
    for url in (T1, f"/s/{sid}", f"{T1}/leaderboard"):
        html = b.get(url).text
        assert "<script>alert" not in html and "<img src=x" not in html, url
        assert 'href="javascript:' not in html, url
    sub_page = b.get(f"/s/{sid}").text
    assert sub_page.count("&lt;script&gt;") >= 3  # output, test name, message
    assert "<svg" in sub_page and "ideal" in sub_page  # the scaling plot
    board = b.get(f"{T1}/leaderboard").text
    assert 'class="you"' in board and "ada (you)" in board


def test_a_student_cannot_open_another_students_submission(world: World) -> None:
    sid = world.submit(world.ada, REFERENCE).json()["id"]
    bob = browser(world, "bob@uni.edu")
    assert bob.get(f"/s/{sid}").status_code == 404
    assert bob.get(f"/s/{sid}/events").status_code == 404
    prof = browser(world, "prof@uni.edu", "prof-pass-4821")
    assert prof.get(f"/s/{sid}").status_code == 200


def test_the_event_stream_ends_when_the_grade_is_in(world: World, engine: Engine) -> None:
    sid = world.submit(world.ada, REFERENCE).json()["id"]
    store(engine, sid)
    b = browser(world)
    with b.stream("GET", f"/s/{sid}/events") as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        body = "".join(r.iter_text())
    assert body.startswith("data: ") and '"status": "graded"' in body and '"final": true' in body


def test_the_leaderboard_stream_announces_each_change_of_the_board(world: World,
                                                                  engine: Engine) -> None:
    sid = world.submit(world.ada, REFERENCE).json()["id"]
    b = browser(world)
    with b.stream("GET", f"{T1}/leaderboard/events") as r:
        lines = (line for line in r.iter_lines() if line.startswith("data: "))
        before = next(lines)
        store(engine, sid)  # the grade lands: the board changes
        after = next(lines)  # within one poll interval
    assert after != before
    assert "ada" in b.get(f"{T1}/leaderboard").text  # and the page shows the new entry


def test_an_open_event_stream_holds_no_database_connection(world: World, engine: Engine) -> None:
    """500 browsers watching a leaderboard must not need 500 pooled connections."""
    sid = world.submit(world.ada, REFERENCE).json()["id"]
    b = browser(world)
    for url in (f"{T1}/leaderboard/events", f"/s/{sid}/events"):
        with b.stream("GET", url) as r:
            first = next(r.iter_lines())
            assert first.startswith("data: ")
            assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]


# instructors ---------------------------------------------------------------------------------
def _t1_zip(version: bytes = b'"1.1.0"') -> bytes:
    folder = REPO_ROOT / "assignments/treasure-hunt/t1-multiprocessing"
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    files["assignment.toml"] = files["assignment.toml"].replace(b'"1.1.0"', version)
    return zip_of(files)


def test_an_instructor_creates_a_course_and_imports_packages(world: World) -> None:
    prof = browser(world, "prof@uni.edu", "prof-pass-4821")
    token = csrf(prof.get("/").text)
    r = prof.post("/courses", data={"csrf_token": token, "slug": "hpc", "title": "HPC <b>101</b>"})
    assert r.status_code == 303 and r.headers["location"] == "/c/hpc"
    page = prof.get("/c/hpc").text
    assert "HPC &lt;b&gt;101&lt;/b&gt;" in page and 'class="join-code"' in page
    bad = zip_of({"assignment.toml": b'slug = "Bad Slug"\n'})
    r = prof.post("/c/hpc/import", data={"csrf_token": token},
                  files={"package": ("bad.zip", bad)})
    assert r.status_code == 422 and r.text.count("<li><code>assignment.toml</code>") >= 3
    r = prof.post("/c/hpc/import", data={"csrf_token": token},
                  files={"package": ("t1.zip", _t1_zip())})
    assert r.status_code == 303 and r.headers["location"] == "/c/hpc?imported=t1-multiprocessing"
    r = prof.get(r.headers["location"])
    assert r.status_code == 200 and "Imported t1-multiprocessing 1.1.0: validating" in r.text
    assert "/c/hpc/t1-multiprocessing/manage" in r.text
    student = browser(world)
    assert student.get("/c/th").status_code == 403
    assert student.get("/c/th/t1-multiprocessing/manage").status_code == 403
    assert student.get("/fleet").status_code == 403
    r = student.post("/courses", data={"csrf_token": csrf(student.get("/").text), "slug": "x",
                                       "title": "x"})
    assert r.status_code == 403


def test_an_instructor_sets_the_policy_filters_and_regrades(world: World) -> None:
    sid = world.submit(world.ada, REFERENCE).json()["id"]
    world.submit(world.bob, REFERENCE)
    prof = browser(world, "prof@uni.edu", "prof-pass-4821")
    manage = f"{T1}/manage"
    assert f'href="{manage}"' in prof.get(T1).text
    assert f'href="{manage}"' not in browser(world).get(T1).text  # not for students
    page = prof.get(manage).text
    assert "reference passes" in page and "what students get" in page
    token = csrf(page)
    form = {"csrf_token": token, "late_policy": "penalty", "late_penalty": "0.25",
            "quota_count": "7", "quota_window_min": "30", "speedup_min": "1",
            "speedup_full": "1.7"}  # the package's curve, unchanged
    r = prof.post(f"{manage}/policy", data={**form, "deadline": "next friday"})
    assert r.status_code == 422 and "time zone" in r.text
    r = prof.post(f"{manage}/policy", data={**form, "deadline": "2030-01-01T12:00+01:00"})
    assert r.status_code == 303
    a = world.get(world.ada, "/api/courses/th/assignments/t1-multiprocessing").json()
    assert (a["late_policy"], a["late_penalty"], a["quota_count"], a["quota_window_s"]) == \
        ("penalty", 0.25, 7, 1800)
    assert a["deadline"].startswith("2030-01-01T11:00")
    r = prof.post(f"{manage}/policy", data={**form, "speedup_min": "2", "speedup_full": "1.5"})
    assert r.status_code == 422 and "must be above" in r.text
    r = prof.post(f"{manage}/policy", data={**form, "speedup_min": "1.2", "speedup_full": "2.4"})
    assert r.status_code == 303
    a = world.get(world.ada, "/api/courses/th/assignments/t1-multiprocessing").json()
    assert (a["speedup_min"], a["speedup_full"], a["deadline"]) == (1.2, 2.4, None)
    filtered = prof.get(manage, params={"student": "ada"}).text
    assert f'href="/s/{sid}"' in filtered and "bob@uni.edu" not in filtered
    r = prof.post(f"{manage}/regrade-all", data={"csrf_token": token})
    assert r.status_code == 303 and r.headers["location"] == f"{manage}?regraded=2"
    assert "2 submission(s) queued for regrading" in prof.get(r.headers["location"]).text
    r = prof.post(f"/s/{sid}/regrade", data={"csrf_token": token})
    assert r.status_code == 303 and r.headers["location"] == f"/s/{sid}"
    ada = browser(world)
    assert ada.post(f"/s/{sid}/regrade", data={"csrf_token": csrf(ada.get("/").text)}
                    ).status_code == 403
    fleet = prof.get("/fleet").text
    assert "No runner has announced itself yet" in fleet and "<td>cpu</td>" in fleet


def test_deadline_passed_and_quota_reached_say_so(world: World) -> None:
    b = browser(world)
    token = csrf(b.get(T1).text)
    world.client.patch("/api/courses/th/assignments/t1-multiprocessing", headers=world.prof,
                       json={"quota_count": 1})
    files = {"files": ("solution.py", REFERENCE)}
    r = b.post(f"{T1}/submit", files={"files": ("notes.txt", REFERENCE)},
               data={"csrf_token": token})  # the page's own check bypassed
    assert r.status_code == 422 and "is not a .py file" in r.text
    assert b.post(f"{T1}/submit", files=files, data={"csrf_token": token}).status_code == 303
    r = b.post(f"{T1}/submit", files=files, data={"csrf_token": token})
    assert r.status_code == 429 and "quota reached: 1 submission per 60 minutes" in r.text
    world.client.patch("/api/courses/th/assignments/t1-multiprocessing", headers=world.prof,
                       json={"quota_count": 10, "late_policy": "reject",
                             "deadline": "2020-01-01T00:00:00+00:00"})
    r = b.post(f"{T1}/submit", files=files, data={"csrf_token": token})
    assert r.status_code == 403 and "the deadline has passed" in r.text
    assert "The deadline has passed; this assignment takes no late submissions" in b.get(T1).text
    assert "Due 2020-01-01 00:00 UTC (late submissions are not accepted)" in b.get(T1).text


def test_a_student_cancels_a_queued_submission(world: World) -> None:
    b = browser(world)
    token = csrf(b.get(T1).text)
    r = b.post(f"{T1}/submit", files={"files": ("solution.py", REFERENCE)},
               data={"csrf_token": token})
    page = r.headers["location"]
    assert "Cancel this submission" in b.get(page).text  # no runner here: it stays queued
    other = browser(world, email="bob@uni.edu")
    r = other.post(f"{page}/cancel", data={"csrf_token": csrf(other.get("/").text)})
    assert r.status_code in (403, 404)
    r = b.post(f"{page}/cancel", data={"csrf_token": token})
    assert r.status_code == 303 and r.headers["location"] == page
    shown = b.get(page).text
    assert "Cancelled; it does not count against your quota." in shown
    assert "Cancel this submission" not in shown
    r = b.post(f"{page}/cancel", data={"csrf_token": token})
    assert r.status_code == 409 and "already cancelled" in r.text


def test_a_student_joins_another_course_from_the_home_page(world: World, engine: Engine) -> None:
    r = world.post(world.prof, "/api/courses", json={"slug": "c2", "title": "Second course"})
    assert r.status_code == 201, r.text
    code = r.json()["join_code"]
    b = browser(world)
    token = csrf(b.get("/").text)
    r = b.post("/join", data={"csrf_token": token, "join_code": "no-such-code"})
    assert r.status_code == 404 and "no course has this join code" in r.text
    assert 'value="no-such-code"' in r.text  # what was typed stays in the form
    r = b.post("/join", data={"csrf_token": token, "join_code": code, "alias": XSS})
    assert r.status_code == 422 and "alias: use letters, digits" in r.text
    assert b.post("/join", data={"join_code": code}).status_code == 403  # no CSRF token
    r = b.post("/join", data={"csrf_token": token, "join_code": code})
    assert r.status_code == 303 and r.headers["location"] == "/?joined=c2"
    home = b.get(r.headers["location"]).text
    assert "You joined <strong>c2</strong>" in home and "Second course" in home
    assert "Treasure hunt" in home  # the first course is still there
    with session_factory(engine)() as s:  # no alias given: the one she shows elsewhere
        aliases = {e.course.slug: e.alias for e in s.scalars(
            select(Enrollment).join(User).where(User.email == "ada@uni.edu"))}
    assert aliases["c2"] == aliases["th"] is not None


def test_pages_say_what_happens_and_a_refusal_keeps_the_header(world: World) -> None:
    ada = browser(world)
    page = ada.get(T1).text
    assert "runs on the <strong>cpu</strong> queue (2 cores)" in page, page
    r = ada.get(f"{T1}/manage")  # a student on a staff page: refused, still in her own header
    assert r.status_code == 403
    assert "ada" in r.text and 'action="/logout"' in r.text and "Back to your courses" in r.text
    prof = browser(world, "prof@uni.edu", "prof-pass-4821")
    assert "scoring.credit" not in prof.get(f"{T1}/reviews").text


def _cpu(parallelism: float) -> dict[str, float]:
    return {"parallelism": parallelism, "parallelism_ci_low": parallelism - 0.05,
            "parallelism_ci_high": parallelism + 0.05, "baseline_parallelism": 1.0,
            "work_ratio": 1.0, "work_ratio_ci_low": 0.98, "work_ratio_ci_high": 1.02,
            "submission_cpu_median_s": 0.3, "baseline_cpu_median_s": 0.3}


def test_a_serial_answer_is_told_it_is_serial_in_one_box(world: World, engine: Engine) -> None:
    """A plain loop under a parallel-credit rule: the credit rule's verdict, in one box, says
    no parallel work was seen and earns nothing; a parallel answer's box says what explains it.
    Never two boxes that contradict each other."""
    seen = {}
    for name, busy in (("serial", 0.93), ("parallel", 1.9)):
        sid = world.submit(world.ada, REFERENCE + f"\n# {name}\n".encode()).json()["id"]
        report = sample_report(median=1.18, lo=1.1, hi=1.3)
        report["scaling"][0]["cpu"] = _cpu(busy)
        parsed = GradeReport.model_validate(report)
        assert parsed.speedup is not None
        judged = credit.decide(policy="parallel", figure=parsed.speedup,
                               point=parsed.scaling[0], cores=2)
        report["credit"] = judged.model_dump(mode="json")
        store(engine, sid, report)
        seen[name] = browser(world).get(f"/s/{sid}").text
    for page in seen.values():
        assert page.count('<div class="credit credit-') == 1, page
    assert "No performance points</strong>" in seen["serial"]
    assert "no parallel work" in seen["serial"] and "explains the speedup" not in seen["serial"]
    assert "Speedup credited</strong>" in seen["parallel"]
    assert "no parallel work" not in seen["parallel"]


def test_the_graders_evidence_is_under_how_this_was_measured(world: World, engine: Engine) -> None:
    """The headline says the verdict, points and speedup; the grader's evidence (its notes, busy
    cores, work ratio, Karp–Flatt) waits in a section the student opens."""
    sid = world.submit(world.ada, REFERENCE).json()["id"]
    report = sample_report(median=1.9, lo=1.8, hi=2.0, credit="credited")
    report["scaling"][0]["cpu"] = _cpu(1.9)
    report["notes"] = ["timed in pairs: both sandboxes alive, calls alternating"]
    store(engine, sid, report)
    page = browser(world).get(f"/s/{sid}").text
    headline, rest = page.split("<h2>Tests</h2>", 1)
    assert "Speedup <strong>1.90×</strong>" in headline
    assert "timed in pairs" not in headline and "busy cores" not in headline
    measured = rest.split("<summary>How this was measured</summary>", 1)[1]
    assert "timed in pairs: both sandboxes alive" in measured
    assert "busy cores</th>" in measured and "1.90 (1.85–1.95)" in measured
    assert "Karp–Flatt e</th>" in measured
