"""Teams through the API (services/people/teams.py), on SQLite and PostgreSQL: an instructor
makes t1 pair work; students create a team and join it by code; one seat is taken once when two
race for it; any member submits for the team and every member reads it; a member who leaves
keeps what was shared and reads nothing handed in after; a student never in the team reads
none of it; the quota is the team's, also when both members upload at once."""

from __future__ import annotations

import csv
import io
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select
from typer.testing import CliRunner

from paragrade.cli import app
from server.db import session_factory
from server.models import AuditLog, Job, Submission
from tests.server.conftest import REFERENCE, RUNNER, World, claim, login
from tests.server.live import Platform
from tests.server.reports import sample_report
from tests.server.test_pages import browser, csrf
from tests.server.test_similarity_runs import _run_on_a_runner
from tests.similarity_corpus import disguise, honest

A = "/api/courses/th/assignments/t1-multiprocessing"


def _student(world: World, name: str) -> dict[str, str]:
    r = world.client.post("/api/auth/register", json={
        "email": f"{name}@uni.edu", "name": name, "password": "studentpass1",
        "join_code": world.join_code, "alias": name})
    assert r.status_code == 201, r.text
    return login(world.client, f"{name}@uni.edu", "studentpass1")


def _pairs(world: World, **extra: Any) -> None:
    r = world.client.patch(A, json={"team_max": 2, "team_min": 2, **extra}, headers=world.prof)
    assert r.status_code == 200, r.text


def _team(world: World, who: dict[str, str], name: str = "Forks") -> dict[str, Any]:
    r = world.post(who, f"{A}/team", json={"name": name})
    assert r.status_code == 201, r.text
    return dict(r.json())


def test_a_pair_forms_by_code_and_the_last_seat_is_taken_once(world: World) -> None:
    assert world.post(world.ada, f"{A}/team", json={"name": "x"}).status_code == 409  # solo work
    _pairs(world)
    assert world.client.patch(A, json={"team_min": 3}, headers=world.prof).status_code == 422
    team = _team(world, world.ada)
    assert [m["email"] for m in team["members"]] == ["ada@uni.edu"] and team["size"] == [2, 2]
    assert world.post(world.ada, f"{A}/team", json={"name": "Again"}).status_code == 409
    assert world.post(world.bob, f"{A}/team/join", json={"code": "nope"}).status_code == 404
    cy, dee = _student(world, "cy"), _student(world, "dee")
    gate = threading.Barrier(3)

    def one(who: dict[str, str]) -> int:
        gate.wait()
        return int(world.post(who, f"{A}/team/join", json={"code": team["join_code"]})
                   .status_code)

    with ThreadPoolExecutor(3) as pool:
        codes = sorted(pool.map(one, (world.bob, cy, dee)))
    assert codes == [200, 409, 409], codes
    mine = world.get(world.ada, f"{A}/team").json()
    assert len(mine["members"]) == 2, mine
    staff = world.get(world.prof, f"{A}/teams").json()
    assert [(t["name"], len(t["members"])) for t in staff] == [("Forks", 2)]
    assert world.get(world.ada, f"{A}/teams").status_code == 403
    # The staff place a student; the lock freezes the students' changes, never the staff's.
    r = world.client.put(f"{A}/teams", json={"email": "cy@uni.edu", "team": "Spoons"},
                         headers=world.prof)
    assert r.status_code == 200 and r.json()["name"] == "Spoons", r.text
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    _pairs(world, team_lock_at=past)
    r = world.post(dee, f"{A}/team/join", json={"code": r.json()["join_code"]})
    assert r.status_code == 409 and "locked" in r.json()["detail"], r.text
    assert world.client.delete(f"{A}/team", headers=world.bob).status_code == 409


def test_any_member_submits_and_a_leaver_keeps_only_what_was_shared(world: World,
                                                                      engine: Engine) -> None:
    _pairs(world)
    cy = _student(world, "cy")
    r = world.submit(world.ada, REFERENCE)
    assert r.status_code == 409 and "create or join a team first" in r.json()["detail"], r.text
    team = _team(world, world.ada)
    r = world.submit(world.ada, REFERENCE)
    assert r.status_code == 409 and "give a classmate your team's join code" in r.json()[
        "detail"], r.text
    assert world.post(world.bob, f"{A}/team/join", json={"code": team["join_code"]}
                      ).status_code == 200
    first = world.submit(world.bob, REFERENCE).json()["id"]
    for who in (world.ada, world.bob):  # both members read it, and list it as theirs
        assert world.get(who, f"/api/submissions/{first}").status_code == 200
        assert [s["id"] for s in world.get(who, "/api/submissions").json()] == [first]
    for route in (f"/api/submissions/{first}", f"/api/submissions/{first}/files",
                  f"/api/submissions/{first}/gradescope.json"):  # every route, as not there
        assert world.get(cy, route).status_code == 404, route
        assert world.get(world.ada, route).status_code in (200, 403), route
    assert world.post(cy, f"/api/submissions/{first}/cancel").status_code == 404
    # Bob leaves; cy takes his seat; the team's next submission is ada's and cy's, not bob's.
    assert world.client.delete(f"{A}/team", headers=world.bob).status_code == 204
    assert world.post(cy, f"{A}/team/join", json={"code": team["join_code"]}).status_code == 200
    second = world.submit(cy, REFERENCE).json()["id"]
    assert world.get(world.bob, f"/api/submissions/{first}").status_code == 200
    assert world.get(world.bob, f"/api/submissions/{second}").status_code == 404
    assert world.get(cy, f"/api/submissions/{first}").status_code == 404
    assert {s["id"] for s in world.get(world.ada, "/api/submissions").json()} == {
        first, second}
    with session_factory(engine)() as s:
        assert {x.team_id for x in s.scalars(select(Submission))} == {team["id"]}
        logged = [a.action for a in s.scalars(select(AuditLog).where(
            AuditLog.action.like("team.%")).order_by(AuditLog.id))]
    assert logged == ["team.create", "team.join", "team.leave", "team.join"], logged


def test_a_leavers_grade_stands_and_the_teams_next_is_not_theirs(world: World) -> None:
    """Graded with the team, bob leaves: his board row and CSV score are the team's first
    grade; the better one the team earns after (ada and cy) is not his; cy, who joined after,
    reads neither the first submission's page nor its report."""
    _pairs(world, team_min=1)
    cy = _student(world, "cy")
    team = _team(world, world.ada)
    assert world.post(world.bob, f"{A}/team/join", json={"code": team["join_code"]}
                      ).status_code == 200
    first = world.submit(world.ada, REFERENCE).json()["id"]
    _answer(world, sample_report(median=1.3, lo=1.2, hi=1.4))
    assert world.client.delete(f"{A}/team", headers=world.bob).status_code == 204
    assert world.post(cy, f"{A}/team/join", json={"code": team["join_code"]}).status_code == 200
    second = world.submit(cy, REFERENCE).json()["id"]
    _answer(world, sample_report(median=1.9, lo=1.8, hi=2.0))
    board = {e["alias"]: e for e in world.get(world.prof, f"{A}/leaderboard").json()}
    assert board["Forks: ada, cy"]["submission_id"] == second, board
    assert board["Forks: bob"]["submission_id"] == first, board
    rows = {row["email"]: row for row in csv.DictReader(io.StringIO(
        world.get(world.prof, f"{A}/grades.csv").text))}
    assert rows["bob@uni.edu"]["submission_id"] == str(first), rows["bob@uni.edu"]
    assert rows["cy@uni.edu"]["submission_id"] == str(second), rows["cy@uni.edu"]
    assert browser(world, "cy@uni.edu").get(f"/s/{first}").status_code == 404


def test_the_quota_is_the_teams_when_both_members_upload_at_once(world: World) -> None:
    _pairs(world, quota_count=3)
    team = _team(world, world.ada)
    assert world.post(world.bob, f"{A}/team/join", json={"code": team["join_code"]}
                      ).status_code == 200
    gate = threading.Barrier(20)

    def one(i: int) -> int:
        gate.wait()
        return int(world.submit(world.ada if i % 2 else world.bob, REFERENCE).status_code)

    with ThreadPoolExecutor(20) as pool:
        codes = sorted(pool.map(one, range(20)))
    assert codes == [201] * 3 + [429] * 17, codes


@pytest.mark.slow
def test_a_pair_forms_its_team_from_the_cli(tmp_path: Path) -> None:
    """`paragrade team create|join|show|leave` against a live server, as two students meet it:
    ada creates the team and reads its join code, bob joins with it, both see both; bob leaves."""
    p = Platform(tmp_path, f"sqla+sqlite:///{tmp_path / 'broker.sqlite'}")
    try:
        code = p.course("treasure-hunt/t1-multiprocessing")
        r = p.http.patch("/api/courses/c/assignments/t1-multiprocessing",
                         json={"team_max": 2}, headers=p.prof)
        assert r.status_code == 200, r.text
        cli, ref = CliRunner(), "c/t1-multiprocessing"

        def as_(name: str, *args: str) -> Any:
            env = {"PARAGRADE_CLIENT_CONFIG": str(tmp_path / f"{name}.json")}
            return cli.invoke(app, list(args), env=env)

        for name in ("ada", "bob"):
            p.student(name, code)
            assert as_(name, "login", p.base, "--email", f"{name}@uni.edu", "--password",
                       "studentpass1").exit_code == 0
        made = as_("ada", "team", "create", ref, "Forks")
        assert made.exit_code == 0 and "team Forks (1 of 1–2)" in made.output, made.output
        join_code = made.output.split("join code: ")[1].split()[0]
        joined = as_("bob", "team", "join", ref, join_code)
        assert joined.exit_code == 0 and "ada@uni.edu" in joined.output, joined.output
        shown = as_("ada", "team", "show", ref)
        assert "bob <bob@uni.edu>" in shown.output and "(2 of 1–2)" in shown.output, shown.output
        assert as_("bob", "team", "leave", ref).exit_code == 0
        gone = as_("bob", "team", "show", ref)
        assert gone.exit_code == 2 and "not in a team of this assignment" in gone.output
        full = as_("bob", "team", "join", ref, "wrong-code")
        assert full.exit_code == 2 and "no team of this assignment has this join code" in (
            full.output), full.output
    finally:
        p.close()


def test_a_teams_grade_flows_to_each_member_and_the_board_lists_it_once(world: World) -> None:
    """The pair's graded submission: one row on the board, named for the team and both
    members, each member's own ("you"); the grades CSV gives each member the score; a member
    who joins later shares none of it."""
    _pairs(world, team_min=1)
    team = _team(world, world.ada)
    assert world.post(world.bob, f"{A}/team/join", json={"code": team["join_code"]}
                      ).status_code == 200
    sid = world.submit(world.bob, REFERENCE).json()["id"]
    offer = claim(world.client)
    assert offer is not None and offer["job"]["submission_id"] == sid
    r = world.client.post(f"/api/runner/jobs/{offer['job_id']}/result",
                          json={"report": sample_report(median=1.7, lo=1.6, hi=1.8)},
                          headers={**RUNNER, "X-Job-Token": offer["token"]})
    assert r.status_code == 204, r.text
    for who in (world.ada, world.bob):
        board = world.get(who, f"{A}/leaderboard").json()
        assert [(e["alias"], e["rank"], e["you"], e["submission_id"]) for e in board] == [
            ("Forks: ada, bob", 1, True, sid)], board
    cy = _student(world, "cy")
    assert world.get(cy, f"{A}/leaderboard").json()[0]["you"] is False
    rows = {row["email"]: row for row in csv.DictReader(io.StringIO(
        world.get(world.prof, f"{A}/grades.csv").text))}
    score = world.get(world.ada, f"/api/submissions/{sid}").json()["score"]
    assert score > 0 and [float(rows[f"{n}@uni.edu"]["best_score"]) for n in ("ada", "bob")] == [
        score, score], rows
    assert rows["cy@uni.edu"]["best_score"] == "", rows


def test_a_final_run_times_a_teams_file_once_and_settles_each_member(world: World) -> None:
    """Two rounds of the pair's one counted submission: two turns, not four; each member's final
    grade is the same settled figure, on the run's page and on the board's one team row."""
    _pairs(world, team_min=1)
    team = _team(world, world.ada)
    assert world.post(world.bob, f"{A}/team/join", json={"code": team["join_code"]}
                      ).status_code == 200
    sid = world.submit(world.ada, REFERENCE).json()["id"]
    _answer(world, sample_report(median=1.7, lo=1.6, hi=1.8))
    r = world.post(world.prof, f"{A}/final-runs", json={"rounds": 2})
    assert r.status_code == 202 and r.json()["turns"] == 2, r.text
    for median in (1.5, 1.9):
        offer = _answer(world, sample_report(median=median, lo=median - 0.1, hi=median + 0.1))
        assert offer["job"]["submission_id"] == sid and offer["job"]["timing_only"]
    assert claim(world.client) is None
    done = world.get(world.prof, f"{A}/final-runs/{r.json()['id']}").json()
    grades = {g["email"]: (g["speedup"], g["turns"]) for g in done["grades"]}
    assert grades == {"ada@uni.edu": (1.7, 2), "bob@uni.edu": (1.7, 2)}, done["grades"]
    board = world.get(world.bob, f"{A}/leaderboard").json()
    assert [(e["alias"], e["speedup"], e["you"]) for e in board] == [
        ("Forks: ada, bob", 1.7, True)], board


def _answer(world: World, report: dict[str, Any]) -> dict[str, Any]:
    offer = claim(world.client)
    assert offer is not None
    r = world.client.post(f"/api/runner/jobs/{offer['job_id']}/result", json={"report": report},
                          headers={**RUNNER, "X-Job-Token": offer["token"]})
    assert r.status_code == 204, r.text
    return offer


def test_similarity_compares_teams_and_never_a_students_own_two(world: World,
                                                                   tmp_path: Path) -> None:
    """The pair hands in one file (one submission for both); bob leaves and hands the same
    file in alone; cy copies it. The run compares the team's, bob's and cy's: cy's copy is
    flagged against both, never bob's against the team's he was in."""
    _pairs(world, team_min=1)
    cy = _student(world, "cy")
    team = _team(world, world.ada)
    assert world.post(world.bob, f"{A}/team/join", json={"code": team["join_code"]}
                      ).status_code == 200
    source = honest(3)
    ours = world.submit(world.ada, source[0].encode()).json()["id"]
    assert world.client.delete(f"{A}/team", headers=world.bob).status_code == 204
    his = world.submit(world.bob, source[0].encode()).json()["id"]
    copy = world.submit(cy, disguise(source[0]).encode()).json()["id"]
    r = world.post(world.prof, f"{A}/similarity", json={"basis": "latest", "threshold": 0.5})
    assert r.status_code == 202 and r.json()["submissions"] == 3, r.text  # the team's once
    with world.client.app.state.sessions() as s:  # type: ignore[attr-defined]
        for job in s.scalars(select(Job).where(Job.kind == "grade")):
            job.state = "cancelled"
        s.commit()
    _run_on_a_runner(world, tmp_path)
    done = world.get(world.prof, f"{A}/similarity/{r.json()['id']}").json()
    assert sorted((p["a"], p["b"]) for p in done["pairs"]) == [(ours, copy), (his, copy)], done


def test_a_pair_forms_its_team_on_the_assignment_page(world: World) -> None:
    """The page's team card: ada creates "Forks" and reads its join code; bob joins with it and
    sees both names; a wrong code is refused on the page, saying so; bob leaves."""
    _pairs(world)
    page = "/c/th/t1-multiprocessing"
    ada, bob = browser(world), browser(world, "bob@uni.edu")
    form = ada.get(page).text
    assert "Your team" in form and "Create a team" in form and "teams of 2" not in form
    r = ada.post(f"{page}/team", data={"csrf_token": csrf(form), "name": "Forks"})
    assert r.status_code == 303 and r.headers["location"].endswith("#team"), r.text
    card = ada.get(page).text
    code = card.split("Join code: <code>")[1].split("</code>")[0]
    form = bob.get(page).text
    wrong = bob.post(f"{page}/team/join", data={"csrf_token": csrf(form), "code": "nope"})
    assert wrong.status_code == 404 and "no team of this assignment has this join code" in (
        wrong.text)
    r = bob.post(f"{page}/team/join", data={"csrf_token": csrf(form), "code": code})
    assert r.status_code == 303, r.text
    card = bob.get(page).text
    assert "<strong>Forks</strong>: ada, bob (2 of 2–2)" in card, card
    sid = world.submit(world.ada, REFERENCE).json()["id"]
    assert "handed in by ada for the team Forks" in bob.get(f"/s/{sid}").text
    staff = browser(world, "prof@uni.edu", "prof-pass-4821").get(f"{page}/manage").text
    assert "ada &lt;ada@uni.edu&gt; <span class=\"muted\">for Forks</span>" in staff
    r = bob.post(f"{page}/team/leave", data={"csrf_token": csrf(card)})
    assert r.status_code == 303 and "Create a team" in bob.get(page).text


def test_a_teams_extension_moves_its_deadline_and_a_personal_one_does_not(world: World) -> None:
    """Past the deadline (late work loses half its points): ada's personal extension does not
    make the team's submission on time; the team's extension does, restated at once, for both
    members' grades; taken back, the submission is late again."""
    past = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    later = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    _pairs(world, team_min=1, deadline=past, late_policy="penalty", late_penalty=0.5)
    r = world.client.put(f"{A}/extensions/ada@uni.edu", json={"deadline": later},
                         headers=world.prof)
    assert r.status_code == 200, r.text
    team = _team(world, world.ada)
    assert world.post(world.bob, f"{A}/team/join", json={"code": team["join_code"]}
                      ).status_code == 200
    sid = world.submit(world.ada, REFERENCE).json()["id"]
    _answer(world, sample_report(median=1.7, lo=1.6, hi=1.8))
    late = world.get(world.bob, f"/api/submissions/{sid}").json()
    assert late["late"] is True, late
    url = f"{A}/teams/{team['id']}/extension"
    assert world.client.put(url, json={"deadline": later}, headers=world.ada).status_code == 403
    r = world.client.put(url, json={"deadline": later, "reason": "flu"}, headers=world.prof)
    assert r.status_code == 200 and r.json()["deadline"] is not None, r.text
    on_time = world.get(world.bob, f"/api/submissions/{sid}").json()
    assert on_time["late"] is False and on_time["score"] > late["score"], (on_time, late)
    board = world.get(world.ada, f"{A}/leaderboard").json()
    assert board[0]["score"] == on_time["score"], board
    assert world.client.delete(url, headers=world.prof).status_code == 200
    assert world.get(world.ada, f"/api/submissions/{sid}").json()["late"] is True


def test_class_statistics_count_teams_and_watch_a_student_in_none(world: World) -> None:
    """The course's statistics: t1's teams counted; bob, in no team of open team work, on the
    watchlist; ada's team's submission counts as submitted for bob once he joins."""
    _pairs(world, team_min=1)
    team = _team(world, world.ada)
    stats = world.get(world.prof, "/api/courses/th/stats").json()
    assert stats["assignments"][0]["teams"] == 1, stats["assignments"]
    assert [(w["email"], w["why"]) for w in stats["watchlist"]] == [
        ("bob@uni.edu", "in no team for Treasure hunt 1: a chunked sum with multiprocessing.Pool "
         "(team work)")], stats["watchlist"]
    assert world.post(world.bob, f"{A}/team/join", json={"code": team["join_code"]}
                      ).status_code == 200
    world.submit(world.ada, REFERENCE)
    _answer(world, sample_report(median=1.7, lo=1.6, hi=1.8))
    stats = world.get(world.prof, "/api/courses/th/stats").json()
    assert stats["watchlist"] == [] and stats["assignments"][0]["submitted"] == 2, stats
    students = {x["email"]: x for x in world.get(world.prof, f"{A}/stats").json()["students"]}
    assert [(students[e]["submissions"], students[e]["passed"]) for e in (
        "ada@uni.edu", "bob@uni.edu")] == [(1, True), (1, True)], students


def test_a_teams_rubric_grade_is_given_once_and_read_and_questioned_by_each_member(
        world: World) -> None:
    """By hand: one grade for the pair (the grading queue holds the team once); once released
    each member reads it and its points count in each member's CSV row; bob's regrade request
    is ada's to read too."""
    _pairs(world, team_min=1)
    team = _team(world, world.ada)
    assert world.post(world.bob, f"{A}/team/join", json={"code": team["join_code"]}
                      ).status_code == 200
    world.submit(world.bob, REFERENCE)
    _answer(world, sample_report(median=1.7, lo=1.6, hi=1.8))
    r = world.client.put(f"{A}/rubric", json={"points": 20, "weight": 1.0},
                         headers=world.prof)
    assert r.status_code == 200, r.text
    item = world.post(world.prof, f"{A}/rubric/items", json={
        "title": "uses a collective", "points": 10, "group": "code"}).json()["id"]
    grade = world.post(world.prof, f"{A}/grading/next").json()
    assert grade["student"].endswith("(team Forks)"), grade
    g = f"{A}/grading/{grade['id']}"
    assert world.client.put(f"{g}/items/{item}", json={"applied": True},
                            headers=world.prof).status_code == 200
    assert world.post(world.prof, f"{g}/done", json={}).json()["points"] == 10.0
    assert world.post(world.prof, f"{A}/grading/next").status_code == 204  # the team's once
    assert world.post(world.prof, f"{A}/grading/release", json={}).status_code == 200
    for who in (world.ada, world.bob):
        assert world.get(who, f"{A}/feedback").json()["points"] == 10.0
    rows = {row["email"]: row for row in csv.DictReader(io.StringIO(
        world.get(world.prof, f"{A}/grades.csv").text))}
    assert [rows[f"{n}@uni.edu"]["manual_points"] for n in ("ada", "bob")] == ["10.0"] * 2, rows
    r = world.post(world.bob, f"{A}/feedback/regrade-requests",
                   json={"item_id": item, "reason": "We also explained it."})
    assert r.status_code == 201, r.text
    seen = world.get(world.ada, f"{A}/feedback").json()["requests"]
    assert [x["reason"] for x in seen] == ["We also explained it."], seen


def test_the_staff_build_teams_from_a_csv_or_at_random(world: World) -> None:
    """A CSV places each row's student, or refuses the whole file naming the line that is
    wrong; the rest of the class is shuffled into teams of the largest size."""
    _pairs(world)
    for name in ("cy", "dee", "eve"):
        _student(world, name)
    url = f"{A}/teams/import"
    bad = "email,team\nada@uni.edu,Forks\nnobody@uni.edu,Forks\n"
    r = world.post(world.prof, url, json={"csv": bad})
    assert r.status_code == 422 and "line 3" in r.json()["detail"], r.text
    assert world.get(world.prof, f"{A}/teams").json() == []  # nothing stored
    assert world.post(world.ada, url, json={"csv": "email,team\n"}).status_code == 403
    r = world.post(world.prof, url, json={"csv": "email,team\nada@uni.edu,Forks\n"
                                                 "bob@uni.edu,Forks\n"})
    assert r.status_code == 200 and [len(t["members"]) for t in r.json()] == [2], r.text
    r = world.post(world.prof, f"{A}/teams/random")
    assert r.status_code == 200, r.text
    sizes = sorted(len(t["members"]) for t in world.get(world.prof, f"{A}/teams").json())
    assert sizes == [1, 2, 2], sizes  # cy, dee and eve: a pair and one alone


def test_two_teams_created_at_once_under_one_name_make_one(world: World) -> None:
    _pairs(world)
    gate = threading.Barrier(2)

    def one(who: dict[str, str]) -> int:
        gate.wait()
        return int(world.post(who, f"{A}/team", json={"name": "Forks"}).status_code)

    with ThreadPoolExecutor(2) as pool:
        codes = sorted(pool.map(one, (world.ada, world.bob)))
    assert codes == [201, 409], codes
    assert [t["name"] for t in world.get(world.prof, f"{A}/teams").json()] == ["Forks"]


def test_the_staff_reuse_another_assignments_teams(world: World) -> None:
    """t2 takes t1's pairs as they stand: the same names and members; a course's other
    assignment only."""
    _pairs(world)
    team = _team(world, world.ada)
    assert world.post(world.bob, f"{A}/team/join", json={"code": team["join_code"]}
                      ).status_code == 200
    r = world.post(world.prof, "/api/courses/th/assignments/import",
                   json={"path": "treasure-hunt/t2-mpi"})
    assert r.status_code == 201, r.text
    t2 = "/api/courses/th/assignments/t2-mpi"
    assert world.client.patch(t2, json={"team_max": 2}, headers=world.prof).status_code == 200
    assert world.post(world.ada, f"{t2}/teams/copy", json={"source": "t1-multiprocessing"}
                      ).status_code == 403
    r = world.post(world.prof, f"{t2}/teams/copy", json={"source": "t1-multiprocessing"})
    assert r.status_code == 200, r.text
    assert [(t["name"], sorted(m["email"] for m in t["members"])) for t in r.json()] == [
        ("Forks", ["ada@uni.edu", "bob@uni.edu"])], r.json()
    assert world.post(world.prof, f"{t2}/teams/copy", json={"source": "t2-mpi"}
                      ).status_code == 422
    assert world.get(world.bob, f"{t2}/team").json()["join_code"] != team["join_code"]


def test_the_instructor_sets_team_work_and_builds_teams_on_the_manage_page(world: World) -> None:
    """The manage page's team card: sizes, who forms teams and the lock; a CSV file of teams
    (one holding a control character refused, saying so, nothing stored); the rest at random;
    the teams listed with their members."""
    page = "/c/th/t1-multiprocessing/manage"
    prof = browser(world, "prof@uni.edu", "prof-pass-4821")
    form = prof.get(page).text
    assert 'name="team_max"' in form and "No team yet" not in form  # individual work so far
    r = prof.post(f"{page}/teams", data={"csrf_token": csrf(form), "team_max": "2",
                                         "team_min": "1", "by_students": "on", "lock_at": ""})
    assert r.status_code == 303, r.text
    form = prof.get(page).text
    assert "No team yet" in form
    bad = b"email,team\nada@uni.edu,Fo\x1bks\n"
    r = prof.post(f"{page}/teams-import", data={"csrf_token": csrf(form)},
                  files=[("csv", ("teams.csv", bad, "text/csv"))])
    assert r.status_code == 422 and "control character" in r.text, r.text
    good = b"email,team\nada@uni.edu,Forks\n"
    r = prof.post(f"{page}/teams-import", data={"csrf_token": csrf(form)},
                  files=[("csv", ("teams.csv", good, "text/csv"))])
    assert r.status_code == 303, r.text
    r = prof.post(f"{page}/teams-random", data={"csrf_token": csrf(form)})
    assert r.status_code == 303, r.text
    listed = prof.get(page).text
    assert "<strong>Forks</strong>: ada &lt;ada@uni.edu&gt;" in listed, listed
    assert "<strong>Team 1</strong>: bob &lt;bob@uni.edu&gt;" in listed, listed
    r = prof.post(f"{page}/teams-place", data={"csrf_token": csrf(listed),
                                               "email": "bob@uni.edu", "team": "Forks"})
    assert r.status_code == 303, r.text
    assert "<strong>Forks</strong>: ada &lt;ada@uni.edu&gt;, bob" in prof.get(page).text
    r = prof.post(f"{page}/teams-place", data={"csrf_token": csrf(listed),
                                               "email": "nobody@uni.edu", "team": "Forks"})
    assert r.status_code == 404 and "no student" in r.text
