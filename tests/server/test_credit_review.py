"""The server's side of the speedup credit: the leaderboard never ranks a held or
refused speedup, instructors review them (API and page), every decision is audit-logged."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from server.db import session_factory
from server.models import AuditLog
from tests.server.conftest import REFERENCE, World
from tests.server.reports import sample_report, store
from tests.server.test_pages import browser, csrf

BOARD = "/api/courses/th/assignments/t1-multiprocessing/leaderboard"


def graded(world: World, engine: Engine, who: dict[str, str], **report: object) -> int:
    sid = int(world.submit(who, REFERENCE).json()["id"])
    store(engine, sid, sample_report(**report))  # type: ignore[arg-type]
    return sid


def test_a_refused_speedup_is_never_ranked_above_an_honest_one(world: World,
                                                                engine: Engine) -> None:
    graded(world, engine, world.ada, median=1.6, lo=1.5, hi=1.7, credit="credited")
    cheat = graded(world, engine, world.bob, median=4800.0, lo=4500.0, hi=5000.0,
                   credit="refused")
    board = world.get(world.ada, BOARD).json()
    assert [(e["alias"], e["rank"], e["mark"]) for e in board] == [
        ("ada", 1, None), ("bob", None, "speedup not credited")]
    assert board[1]["speedup"] == 4800.0  # shown, with its mark, never ranked
    assert (board[0]["ci_low"], board[0]["ci_high"]) == (1.5, 1.7)  # a credited CI as measured
    got = world.get(world.bob, f"/api/submissions/{cheat}").json()
    assert got["score"] == 60 and got["report"]["credit"]["status"] == "refused"


def test_a_speedup_measured_under_interference_is_ranked_with_a_mark(world: World,
                                                                     engine: Engine) -> None:
    """The platform judged the figure unreliable (the node short of cores most of the timing):
    it still ranks (it may only be low), and the board says what to make of it."""
    graded(world, engine, world.ada, median=1.9, lo=1.8, hi=2.0, credit="credited",
           interfered=False)
    short = graded(world, engine, world.bob, median=1.2, lo=1.1, hi=1.3, credit="credited",
                   interfered=True)
    board = world.get(world.ada, BOARD).json()
    assert [(e["alias"], e["rank"], e["mark"]) for e in board] == [
        ("ada", 1, None), ("bob", 2, "measured while the node was short of cores")]
    page = browser(world).get("/c/th/t1-multiprocessing/leaderboard").text
    assert "(measured while the node was short of cores)" in page
    report = browser(world, "bob@uni.edu").get(f"/s/{short}").text
    assert "short of cores in 10 of 12 timed windows (1.3 of 2 cores); 4 were timed again" in \
        " ".join(report.split())


def test_instructors_review_held_speedups(world: World, engine: Engine) -> None:
    graded(world, engine, world.ada, median=1.6, lo=1.5, hi=1.7, credit="credited")
    held = graded(world, engine, world.bob, median=14.0, lo=13.0, hi=15.0, credit="held")
    assert world.get(world.bob, BOARD).json()[1]["mark"] == "held for review"
    reviews = world.get(world.prof, "/api/courses/th/assignments/t1-multiprocessing/reviews")
    assert reviews.status_code == 200
    assert [(r["submission_id"], r["credit"], r["review"]) for r in reviews.json()] == [
        (held, "held", None)]
    assert "1/100 of the baseline's work" in reviews.json()[0]["reason"]
    # Students neither list nor decide (their own submission: 403; someone else's: 404).
    assert world.get(world.bob, "/api/courses/th/assignments/t1-multiprocessing/reviews"
                     ).status_code == 403
    assert world.post(world.bob, f"/api/submissions/{held}/review",
                      json={"decision": "grant"}).status_code == 403
    assert world.post(world.ada, f"/api/submissions/{held}/review",
                      json={"decision": "grant"}).status_code == 404
    assert world.post(world.prof, f"/api/submissions/{held}/review",
                      json={"decision": "maybe"}).status_code == 422
    r = world.post(world.prof, f"/api/submissions/{held}/review", json={"decision": "grant"})
    assert r.status_code == 200, r.text
    assert r.json()["review"] == "granted" and r.json()["score"] == 100  # 14× ≥ speedup_full
    board = world.get(world.ada, BOARD).json()
    assert [(e["alias"], e["rank"], e["mark"]) for e in board] == [("bob", 1, None),
                                                                   ("ada", 2, None)]
    assert board[0]["speedup"] == pytest.approx(2.3)  # ranked no higher than 2 cores can give
    # A regrade that holds it again keeps the instructor's grant (the same code, judged already).
    store(engine, held, sample_report(median=15.0, lo=14.0, hi=16.0, credit="held"))
    again = world.get(world.bob, f"/api/submissions/{held}").json()
    assert again["score"] == 100 and world.get(world.ada, BOARD).json()[0]["alias"] == "bob"
    # Refusing afterwards takes the points and the rank away again; both decisions are logged.
    r = world.post(world.prof, f"/api/submissions/{held}/review", json={"decision": "refuse"})
    assert r.json()["review"] == "refused" and r.json()["score"] == 60
    assert [e["rank"] for e in world.get(world.ada, BOARD).json()] == [1, None]
    with session_factory(engine)() as s:
        actions = s.scalars(select(AuditLog.action).where(AuditLog.target == str(held))).all()
    assert actions == ["speedup.grant", "speedup.refuse"]


def test_a_credited_speedup_cannot_be_reviewed(world: World, engine: Engine) -> None:
    sid = graded(world, engine, world.ada, credit="credited")
    r = world.post(world.prof, f"/api/submissions/{sid}/review", json={"decision": "grant"})
    assert r.status_code == 409 and "no held or refused speedup" in r.json()["detail"]


def test_the_review_page_grants_for_instructors_only(world: World, engine: Engine) -> None:
    held = graded(world, engine, world.bob, median=14.0, lo=13.0, hi=15.0, credit="held")
    prof = browser(world, "prof@uni.edu", "prof-pass-4821")
    page = prof.get("/c/th/t1-multiprocessing/reviews")
    assert page.status_code == 200 and f'href="/s/{held}"' in page.text
    assert "1/100 of the baseline" in page.text and 'value="grant"' in page.text
    bob = browser(world, "bob@uni.edu")
    assert bob.get("/c/th/t1-multiprocessing/reviews").status_code == 403
    mine = bob.get(f"/s/{held}")
    assert mine.status_code == 200 and "Held for review" in mine.text
    assert 'value="grant"' not in mine.text
    assert bob.post(f"/s/{held}/review", data={"csrf_token": csrf(mine.text),
                                               "decision": "grant"}).status_code == 403
    assert prof.post(f"/s/{held}/review", data={"csrf_token": "forged", "decision": "grant"}
                     ).status_code == 403
    r = prof.post(f"/s/{held}/review", data={"csrf_token": csrf(page.text), "decision": "grant"})
    assert r.status_code == 303 and r.headers["location"] == f"/s/{held}"
    assert "granted the measured speedup" in bob.get(f"/s/{held}").text


def test_the_upgrade_holds_pre_policy_speedups_its_cores_cannot_explain(tmp_path: Path) -> None:
    import json

    from sqlalchemy import create_engine, text

    from server import migrate

    url = f"sqlite:///{tmp_path / 'old.db'}"
    migrate.upgrade(url, "0005")
    engine = create_engine(url)
    manifest = {"resources": {"kind": "cpu", "cores": 2}}
    with engine.begin() as c:  # the tables as 0005 left them: no credit columns yet
        c.execute(text("INSERT INTO users (id, email, name, password_hash, is_instructor, "
                       "created_at) VALUES (1, 'a@b.c', 'A', 'x', 0, '2026-01-01')"))
        c.execute(text("INSERT INTO courses (id, slug, title, join_code, created_at) "
                       "VALUES (1, 'c', 'C', 'j', '2026-01-01')"))
        c.execute(text("INSERT INTO artifacts (sha256, size, kind, created_at) "
                       "VALUES ('s', 1, 'bundle', '2026-01-01')"))
        c.execute(text("INSERT INTO assignments (id, course_id, slug, title, late_policy, "
                       "late_penalty, quota_count, quota_window_s) "
                       "VALUES (1, 1, 'a', 'A', 'accept', 0, 20, 3600)"))
        c.execute(text("INSERT INTO assignment_versions (id, assignment_id, version, manifest, "
                       "bundle_sha256, status, created_at) VALUES (1, 1, '1', :m, 's', 'ready', "
                       "'2026-01-01')"), {"m": json.dumps(manifest)})
        for sid, speedup in ((1, 4800.0), (2, 1.8)):
            c.execute(text("INSERT INTO submissions (id, user_id, assignment_id, version_id, "
                           "archive_sha256, filenames, status, late, counts_for_quota, "
                           "created_at) VALUES (:i, 1, 1, 1, 's', '[]', 'graded', 0, 1, "
                           "'2026-01-01')"), {"i": sid})
            c.execute(text("INSERT INTO grade_reports (id, submission_id, verdict, score, "
                           "max_score, speedup_median, report, created_at) VALUES (:i, :i, "
                           "'passed', 100, 100, :s, '{}', '2026-01-01')"), {"i": sid, "s": speedup})
    migrate.upgrade(url, "head")
    with engine.begin() as c:
        got = c.execute(text("SELECT id, credit_status, credited_speedup FROM grade_reports "
                             "ORDER BY id")).all()
    assert [tuple(r) for r in got] == [(1, "held", None), (2, None, 1.8)]
    with engine.begin() as c:  # 0007 chose the board's entry: the ranked one before the held
        board = c.execute(text("SELECT assignment_id, user_id, submission_id FROM board_entries"))
        assert [tuple(r) for r in board] == [(1, 1, 2)]
