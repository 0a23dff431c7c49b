"""The API as users meet it, on SQLite and PostgreSQL: accounts, import, uploads, access, runners."""

from __future__ import annotations

import io
import zipfile
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select

from runners.protocol import JobOutcome
from server import metrics
from server.db import session_factory
from server.models import Artifact, Submission
from tests.server.conftest import REFERENCE, World, bearer, claim, login, zip_of

RUNNER = {**bearer("runner-secret-1234"), "X-Runner-Key": "test-runner-key-0123456789"}  # conftest.claim's


def count(engine: Engine, model: type) -> int:
    with session_factory(engine)() as s:
        return int(s.scalar(select(func.count()).select_from(model)) or 0)


# accounts -----------------------------------------------------------------------------------
def test_register_login_and_revoke(world: World) -> None:
    c = world.client
    assert c.get("/api/me", headers=world.ada).json()["email"] == "ada@uni.edu"
    assert c.delete("/api/auth/token", headers=world.ada).status_code == 204
    r = c.get("/api/me", headers=world.ada)
    assert r.status_code == 401 and "revoked" in r.json()["detail"]


def test_bad_credentials_and_duplicates(world: World) -> None:
    c = world.client
    r = c.post("/api/auth/token", json={"email": "ada@uni.edu", "password": "wrong-password"})
    assert r.status_code == 403 and r.json()["detail"] == "wrong email or password"
    r = c.post("/api/auth/register", json={"email": "ADA@uni.edu", "name": "x",
                                           "password": "whatever-1234", "join_code": world.join_code})
    assert r.status_code == 409
    r = c.post("/api/auth/register", json={"email": "eve@uni.edu", "name": "eve",
                                           "password": "whatever-1234", "join_code": "nope-nope"})
    assert r.status_code == 404 and "join code" in r.json()["detail"]
    r = c.post("/api/auth/register", json={"email": "not-an-email", "name": "x",
                                           "password": "short", "join_code": world.join_code})
    assert r.status_code == 422 and "password" in r.json()["detail"]


def test_no_token_no_entry(world: World) -> None:
    r = world.client.get("/api/courses")
    assert r.status_code == 401 and "log in" in r.json()["detail"]


@pytest.mark.real_password_hash
def test_passwords_are_argon2_hashes(world: World, engine: Engine) -> None:
    """At pwdlib's recommended cost (the other tests hash at the lowest, for speed)."""
    from server.models import User

    with session_factory(engine)() as s:
        hashes = s.scalars(select(User.password_hash)).all()
    assert len(hashes) == 3
    assert all(h.startswith("$argon2id$v=19$m=65536,t=3,p=4$") for h in hashes), hashes


# courses and import ------------------------------------------------------------------------
def test_students_cannot_create_courses_or_import(world: World) -> None:
    assert world.post(world.ada, "/api/courses", json={"slug": "x", "title": "x"}).status_code == 403
    r = world.post(world.ada, "/api/courses/th/assignments/import",
                   json={"path": "treasure-hunt/t2-mpi"})
    assert r.status_code == 403


def test_join_code_only_for_instructors(world: World) -> None:
    mine = world.get(world.ada, "/api/courses").json()
    assert mine == [{"slug": "th", "title": "Treasure hunt", "role": "student", "join_code": None}]
    assert world.get(world.prof, "/api/courses").json()[0]["join_code"] == world.join_code


def test_import_reports_every_problem(world: World) -> None:
    bad = zip_of({"assignment.toml": b'slug = "Bad Slug"\nversion = "x"\n'})
    r = world.post(world.prof, "/api/courses/th/assignments/upload",
                   files={"package": ("p.zip", bad)})
    assert r.status_code == 422
    keys = {p["key"] for p in r.json()["problems"]}
    assert {"slug", "version", "title", "entry", "resources"} <= keys


def test_import_refuses_traversal_and_bombs(world: World) -> None:
    evil = zip_of({"../../etc/passwd": b"x"})
    r = world.post(world.prof, "/api/courses/th/assignments/upload",
                   files={"package": ("p.zip", evil)})
    assert r.status_code == 422 and "unsafe path" in r.json()["detail"]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("big.txt", b"\0" * (50 * 1024 * 1024))
    r = world.post(world.prof, "/api/courses/th/assignments/upload",
                   files={"package": ("p.zip", buf.getvalue())})
    assert r.status_code == 422 and ("bomb" in r.json()["detail"] or "unpacks" in r.json()["detail"])
    r = world.post(world.prof, "/api/courses/th/assignments/import", json={"path": "../../etc"})
    assert r.status_code == 422


def test_import_is_validated_on_a_runner(world: World) -> None:
    from tests.server.conftest import finish_validation

    r = world.post(world.prof, "/api/courses/th/assignments/import",
                   json={"path": "treasure-hunt/t2-mpi"})
    assert r.status_code == 201 and r.json()["validation"] == "validating"
    offer = finish_validation(world.client, ok=False)
    assert offer["validate_job"]["queue"] == "mpi" and offer["job"] is None
    assert world.client.get(f"/api/runner/jobs/{offer['job_id']}/submission",
                            headers={**RUNNER, "X-Job-Token": offer["token"]}).status_code == 403
    mine = world.get(world.prof, "/api/courses/th/assignments/t2-mpi").json()
    assert mine["validation"] == "invalid"
    assert mine["checks"][0]["problems"] == ["hidden/test_hidden.py::test_x: failed: expected 3"]
    theirs = world.get(world.ada, "/api/courses/th/assignments/t2-mpi").json()
    assert theirs["validation"] == "invalid" and theirs["checks"] is None
    r = world.client.post("/api/courses/th/assignments/t2-mpi/submissions", headers=world.ada,
                          files=[("files", ("solution.py", b"def f(): pass\n"))])
    assert r.status_code == 409 and "failed its checks" in r.json()["detail"]
    t1 = world.get(world.prof, "/api/courses/th/assignments/t1-multiprocessing").json()
    assert t1["validation"] == "ready"


def test_reimport_same_content_keeps_the_version(world: World) -> None:
    r = world.post(world.prof, "/api/courses/th/assignments/import",
                   json={"path": "treasure-hunt/t1-multiprocessing"})
    assert r.status_code == 201 and r.json()["version"] == "1.1.0"
    assert len(world.get(world.ada, "/api/courses/th/assignments").json()) == 1


def test_a_new_version_serves_students_only_once_it_validates(world: World) -> None:
    from tests.server.conftest import REPO_ROOT, finish_validation

    folder = REPO_ROOT / "assignments/treasure-hunt/t1-multiprocessing"
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    files["assignment.toml"] = files["assignment.toml"].replace(b'version = "1.1.0"',
                                                                b'version = "1.1.9"')
    assert b'"1.1.9"' in files["assignment.toml"]
    url = "/api/courses/th/assignments/t1-multiprocessing"
    for ok, served in ((False, "1.1.0"), (True, "1.1.9")):
        r = world.post(world.prof, "/api/courses/th/assignments/upload",
                       files={"package": ("p.zip", zip_of(files))})
        assert r.status_code == 201, r.text
        assert r.json()["version"] == "1.1.0" and r.json()["validation"] == "ready"
        assert r.json()["candidate"]["validation"] == "validating"
        assert world.get(world.ada, url).json()["version"] == "1.1.0"  # still the ready one
        finish_validation(world.client, ok=ok)
        assert world.get(world.ada, url).json()["version"] == served
        candidate = world.get(world.prof, url).json()["candidate"]
        assert candidate == (None if ok else {"version": "1.1.9", "validation": "invalid",
                                              "checks": candidate["checks"]})
        assert world.get(world.ada, url).json()["candidate"] is None
        files["statement.md"] += b"\nA changed statement makes a new bundle.\n"
    assert world.submit(world.ada, REFERENCE).status_code == 201


def test_starter_download_has_no_hidden_tests(world: World) -> None:
    r = world.get(world.ada, "/api/courses/th/assignments/t1-multiprocessing/starter")
    assert r.status_code == 200
    kit = zipfile.ZipFile(io.BytesIO(r.content))
    names = kit.namelist()
    assert "starter/solution.py" in names and "statement.md" in names
    assert not any(n.startswith(("hidden/", "reference/", "baseline/")) for n in names)
    # With what plain pytest needs on the student's machine (tests/test_student_kit.py runs it).
    assert "def submission" in kit.read("public_tests/conftest.py").decode()
    assert "python -m pytest -q public_tests" in kit.read("README.txt").decode()


# uploads -----------------------------------------------------------------------------------
def test_upload_rules_and_nothing_stored_when_refused(world: World, engine: Engine) -> None:
    before = (count(engine, Submission), count(engine, Artifact))
    cases = [
        (b"", "solution.py", 422, "empty"),
        (b"\0\1\2", "solution.py", 422, "binary"),
        (b"\xff\xfe bad", "solution.py", 422, "UTF-8"),
        (b"x" * (65 * 1024), "solution.py", 413, "larger"),
        (zip_of({"../evil.py": b"x"}), "s.zip", 422, "unsafe"),
        (zip_of({"other.py": b"x = 1"}), "s.zip", 422, "not a file this assignment takes"),
    ]
    for content, name, code, words in cases:
        r = world.submit(world.ada, content, name)
        assert r.status_code == code and words in r.json()["detail"], (name, r.text)
    assert (count(engine, Submission), count(engine, Artifact)) == before


def test_single_file_is_taken_as_the_entry_file(world: World) -> None:
    r = world.submit(world.ada, REFERENCE, "my_solution.py")
    assert r.status_code == 201
    assert r.json()["filenames"] == ["solution.py"] and r.json()["status"] == "queued"
    assert r.json()["queue_position"] == 1


def test_queue_position_follows_the_fair_share_order(world: World) -> None:
    def position(who: dict[str, str], sid: int) -> int:
        return int(world.get(who, f"/api/submissions/{sid}").json()["queue_position"])

    first = world.submit(world.ada, REFERENCE).json()["id"]  # priority 0
    second = world.submit(world.ada, REFERENCE).json()   # priority 1: Ada has one waiting
    assert second["queue_position"] == 2
    bob = world.submit(world.bob, REFERENCE).json()  # priority 0: ahead of Ada's second
    assert bob["queue_position"] == 2
    assert [position(world.ada, first), position(world.ada, second["id"]),
            position(world.bob, bob["id"])] == [1, 3, 2]
    assert claim(world.client, ("cpu",)) is not None  # the first leaves the queue
    assert [position(world.ada, second["id"]), position(world.bob, bob["id"])] == [2, 1]


def test_quota_is_per_student_and_window(world: World, engine: Engine) -> None:
    r = world.client.patch("/api/courses/th/assignments/t1-multiprocessing",
                           json={"quota_count": 2}, headers=world.prof)
    assert r.status_code == 200
    assert world.submit(world.ada, REFERENCE).status_code == 201
    assert world.submit(world.ada, REFERENCE).status_code == 201
    r = world.submit(world.ada, REFERENCE)
    assert r.status_code == 429 and "quota" in r.json()["detail"]
    assert count(engine, Submission) == 2
    assert world.submit(world.bob, REFERENCE).status_code == 201  # bob has his own


def test_late_policy(world: World) -> None:
    past = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    url = "/api/courses/th/assignments/t1-multiprocessing"
    world.client.patch(url, json={"deadline": past, "late_policy": "reject"}, headers=world.prof)
    r = world.submit(world.ada, REFERENCE)
    assert r.status_code == 403 and "deadline" in r.json()["detail"]
    world.client.patch(url, json={"late_policy": "penalty", "late_penalty": 0.5},
                       headers=world.prof)
    r = world.submit(world.ada, REFERENCE)
    assert r.status_code == 201 and r.json()["late"] is True
    r = world.client.patch(url, json={"late_policy": "sometimes"}, headers=world.prof)
    assert r.status_code == 422
    assert world.client.patch(url, json={"quota_count": 5}, headers=world.ada).status_code == 403


# access ------------------------------------------------------------------------------------
def test_students_cannot_read_each_other(world: World) -> None:
    sid = world.submit(world.ada, REFERENCE).json()["id"]
    for url in (f"/api/submissions/{sid}", f"/api/submissions/{sid}/files"):
        assert world.get(world.bob, url).status_code == 404
        assert world.get(world.ada, url).status_code == 200
        assert world.get(world.prof, url).status_code == 200
    assert world.get(world.bob, "/api/submissions").json() == []
    assert world.post(world.ada, f"/api/submissions/{sid}/regrade").status_code == 403


def test_outsiders_see_no_course(world: World) -> None:
    c = world.client
    c.post("/api/auth/register", json={"email": "eve@x.org", "name": "eve",
                                       "password": "eve-pass-6620", "join_code": world.join_code})
    # eve is enrolled; a stranger course is not visible to her
    eve = login(c, "eve@x.org", "eve-pass-6620")
    assert c.get("/api/courses/other/assignments", headers=eve).status_code == 404


# runners -----------------------------------------------------------------------------------
def _graded_report(passed: bool = True) -> dict:  # type: ignore[type-arg]
    from tests.server.reports import sample_report

    return sample_report(passed=passed)


def test_a_grading_job_carries_the_references_seconds_per_test(world: World) -> None:
    """Validation measured the reference on each test; every grading calibrates its per-test
    time limits from those seconds (runners/grading/runaway.py)."""
    from tests.server.conftest import REPO_ROOT, finish_validation

    folder = REPO_ROOT / "assignments/treasure-hunt/t1-multiprocessing"
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    files["assignment.toml"] = files["assignment.toml"].replace(b'version = "1.1.0"',
                                                                b'version = "1.2.0"')
    r = world.post(world.prof, "/api/courses/th/assignments/upload",
                   files={"package": ("p.zip", zip_of(files))})
    assert r.status_code == 201, r.text
    seconds = {"hidden/test_hidden.py::test_small": 0.25, "public_tests/test_public.py::t": 0.5}
    finish_validation(world.client, test_seconds=seconds)
    sid = world.submit(world.ada, REFERENCE).json()["id"]
    offer = claim(world.client, ("cpu",))
    assert offer is not None and offer["job"]["submission_id"] == sid
    assert offer["job"]["reference_test_seconds"] == seconds


def test_a_message_claims_the_most_urgent_job_of_its_queue(world: World) -> None:
    """The embedded broker delivers in publish order: a package's check published first does not
    make a student's first submission wait behind it (services/fleet/claims.py)."""
    from server.models import Job
    from tests.server.conftest import REPO_ROOT, RUNNER

    folder = REPO_ROOT / "assignments/treasure-hunt/t1-multiprocessing"
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    files["assignment.toml"] = files["assignment.toml"].replace(b'version = "1.1.0"',
                                                                b'version = "1.3.0"')
    assert world.post(world.prof, "/api/courses/th/assignments/upload",
                      files={"package": ("p.zip", zip_of(files))}).status_code == 201
    sid = world.submit(world.ada, REFERENCE).json()["id"]  # to the version already checked
    with world.client.app.state.sessions() as s:  # type: ignore[attr-defined]
        check, grading = s.scalars(select(Job).where(Job.state == "queued").order_by(Job.id)).all()
    assert check.kind == "validate" and check.priority == 1 and grading.priority == 0

    def turn(job_id: int) -> Any:
        return world.client.post(f"/api/runner/jobs/{job_id}/claim", params={"runner": "r"},
                                 headers=RUNNER)

    first = turn(check.id)  # the check's message, delivered first
    assert first.status_code == 200 and first.json()["job"]["submission_id"] == sid
    with world.client.app.state.sessions() as s:  # type: ignore[attr-defined]
        republished = s.get(Job, check.id)
        assert republished is not None and republished.published_at > check.published_at
    # The grading's message cannot take the check: its time limit is shorter than the check's
    # (the broker enforces the message's). The check's own message, published again, takes it.
    refused = turn(grading.id)
    assert refused.status_code == 409 and "no job waits in the cpu queue" in refused.json()["detail"]
    again = turn(check.id)
    assert again.status_code == 200 and again.json()["validate_job"]["version_id"] is not None
    assert turn(check.id).status_code == 409  # nothing left


def test_runner_claims_fetches_and_records_once(world: World) -> None:
    c = world.client
    sid = world.submit(world.ada, REFERENCE).json()["id"]
    assert c.post("/api/runner/jobs/1/claim", params={"runner": "r"},
                  headers=world.ada).status_code == 401
    offer = claim(c, ("cpu",))
    assert offer is not None
    assert offer["job"]["submission_id"] == sid and offer["job"]["queue"] == "cpu"
    assert claim(c) is None  # nothing left
    jid, tok = offer["job_id"], {"X-Job-Token": offer["token"]}
    again = c.post(f"/api/runner/jobs/{jid}/claim", params={"runner": "r"}, headers=RUNNER)
    assert again.status_code == 409 and "claimed" in again.json()["detail"]  # redelivered message
    assert c.post(f"/api/runner/jobs/{jid}/heartbeat", headers={**RUNNER, **tok}).status_code == 204
    assert c.get(f"/api/runner/jobs/{jid}/bundle", headers={**RUNNER, "X-Job-Token": "x"}
                 ).status_code == 403
    bundle = c.get(f"/api/runner/jobs/{jid}/bundle", headers={**RUNNER, **tok})
    assert "hidden/test_hidden.py" in zipfile.ZipFile(io.BytesIO(bundle.content)).namelist()
    sub = c.get(f"/api/runner/jobs/{jid}/submission", headers={**RUNNER, **tok})
    assert zipfile.ZipFile(io.BytesIO(sub.content)).read("solution.py") == REFERENCE
    assert world.get(world.ada, f"/api/submissions/{sid}").json()["status"] == "running"
    outcome = JobOutcome.model_validate({"report": _graded_report()}).model_dump_json()
    latencies = metrics.REGISTRY.get_sample_value("paragrade_grading_latency_seconds_count")
    for _ in range(2):  # a redelivered result changes nothing
        r = c.post(f"/api/runner/jobs/{jid}/result", content=outcome,
                   headers={**RUNNER, **tok, "Content-Type": "application/json"})
        assert r.status_code in (204, 403)
    assert metrics.REGISTRY.get_sample_value(
        "paragrade_grading_latency_seconds_count") == (latencies or 0) + 1
    got = world.get(world.ada, f"/api/submissions/{sid}").json()
    assert got["status"] == "graded" and got["verdict"] == "passed"
    assert got["report"]["speedup"]["median"] == 1.8
    board = world.get(world.bob, "/api/courses/th/assignments/t1-multiprocessing/leaderboard")
    assert [(e["alias"], e["submission_id"], e["you"]) for e in board.json()] == \
        [("ada", None, False)]


def test_platform_error_requeues_and_is_not_charged(world: World, engine: Engine) -> None:
    c = world.client
    world.client.patch("/api/courses/th/assignments/t1-multiprocessing",
                       json={"quota_count": 1}, headers=world.prof)
    sid = world.submit(world.ada, REFERENCE).json()["id"]
    offer = claim(c)
    assert offer is not None
    outcome = JobOutcome(platform_error="disk full").model_dump_json()
    r = c.post(f"/api/runner/jobs/{offer['job_id']}/result", content=outcome,
               headers={**RUNNER, "X-Job-Token": offer["token"],
                        "Content-Type": "application/json"})
    assert r.status_code == 204
    assert world.get(world.ada, f"/api/submissions/{sid}").json()["status"] == "queued"
    assert world.submit(world.ada, REFERENCE).status_code == 201  # quota not charged


def test_leaderboard_ties_on_overlapping_intervals(world: World, engine: Engine) -> None:
    from runners.protocol import GradeReport
    from server.services.grades import grading
    from tests.server.reports import sample_report

    c = world.client
    figures = {"ada": (2.0, 1.9, 2.1), "bob": (1.95, 1.8, 2.05)}
    for who, token in (("ada", world.ada), ("bob", world.bob)):
        sid = world.submit(token, REFERENCE).json()["id"]
        with session_factory(engine)() as s:
            sub = s.get(Submission, sid)
            assert sub is not None
            med, lo, hi = figures[who]
            grading.store_report(session=s, sub=sub, report=GradeReport.model_validate(
                sample_report(median=med, lo=lo, hi=hi)))
            s.commit()
    board = c.get("/api/courses/th/assignments/t1-multiprocessing/leaderboard",
                  headers=world.ada).json()
    assert [(e["alias"], e["rank"], e["tied"]) for e in board] == [("ada", 1, True),
                                                                   ("bob", 1, True)]
    assert board[0]["you"] and board[0]["submission_id"] is not None
    # Ties do not chain: cy's interval meets bob's but not ada's, so cy does not share ada's
    # rank through bob; dee's meets cy's, so dee shares cy's.
    more = {"cy": (1.8, 1.7, 1.88), "dee": (1.75, 1.65, 1.79)}
    for who, (med, lo, hi) in more.items():
        r = c.post("/api/auth/register", json={"email": f"{who}@uni.edu", "name": who,
                                               "password": "studentpass1",
                                               "join_code": world.join_code, "alias": who})
        assert r.status_code == 201, r.text
        token = login(c, f"{who}@uni.edu", "studentpass1")
        sid = world.submit(token, REFERENCE).json()["id"]
        with session_factory(engine)() as s:
            sub = s.get(Submission, sid)
            assert sub is not None
            grading.store_report(session=s, sub=sub, report=GradeReport.model_validate(
                sample_report(median=med, lo=lo, hi=hi)))
            s.commit()
    board = c.get("/api/courses/th/assignments/t1-multiprocessing/leaderboard",
                  headers=world.ada).json()
    assert [(e["alias"], e["rank"], e["tied"]) for e in board] == [
        ("ada", 1, True), ("bob", 1, True), ("cy", 3, True), ("dee", 3, True)]


def test_health_ready_metrics(world: World) -> None:
    c = world.client
    assert c.get("/healthz").json() == {"status": "ok"}
    assert c.get("/readyz").json() == {"status": "ready"}
    world.submit(world.ada, REFERENCE)
    # A development server answers /metrics to this machine only (it may be bound to a name
    # others reach).
    assert c.get("/metrics").status_code == 403  # TestClient's client is "testclient"
    here = TestClient(c.app, client=("127.0.0.1", 50000))
    text = here.get("/metrics").text
    assert 'paragrade_queue_depth{queue="cpu"} 1.0' in text
    assert "paragrade_http_requests_total" in text
    away = TestClient(c.app, client=("192.0.2.7", 50000))
    r = away.get("/metrics")
    assert r.status_code == 403 and "this machine only" in r.text, r.text


def test_openapi_has_error_models(world: World) -> None:
    spec = world.client.get("/openapi.json").json()
    submit = spec["paths"]["/api/courses/{course}/assignments/{slug}/submissions"]["post"]
    assert {"201", "401", "403", "404", "413", "422", "429"} <= set(submit["responses"])


def test_reaper_requeues_then_fails_without_charging(world: World, engine: Engine) -> None:
    from server.models import Job
    from server.services.fleet import outcomes

    sid = world.submit(world.ada, REFERENCE).json()["id"]
    for attempt in (1, 2):
        offer = claim(world.client)
        assert offer is not None and offer["job"]["submission_id"] == sid
        with session_factory(engine)() as s:
            assert outcomes.reap(session=s, lease_s=60, max_attempts=2) == 0  # it just reported
            job = s.get(Job, offer["job_id"])
            assert job is not None
            job.heartbeat_at = datetime.now(UTC) - timedelta(minutes=2)  # the runner went silent
            s.commit()
            assert outcomes.reap(session=s, lease_s=60, max_attempts=2) == 1
            s.commit()
        got = world.get(world.ada, f"/api/submissions/{sid}").json()
        assert got["status"] == ("queued" if attempt == 1 else "error")
    assert got["verdict"] == "platform_error"
    with session_factory(engine)() as s:
        sub = s.get(Submission, sid)
        assert sub is not None and sub.counts_for_quota is False


def test_lost_messages_are_published_again_in_fair_share_order(world: World,
                                                                engine: Engine) -> None:
    from server.dispatch import outbox
    from server.models import Job
    from server.services.records import jobs

    ada1, ada2 = (world.submit(world.ada, REFERENCE).json()["id"] for _ in range(2))
    bob1 = world.submit(world.bob, REFERENCE).json()["id"]
    with session_factory(engine)() as s:
        grading = list(s.scalars(select(Job).where(Job.kind == "grade")))
        for job in grading:  # Ada's went out a while ago, Bob's a moment ago
            if job.submission_id != bob1:
                job.published_at = datetime.now(UTC) - timedelta(minutes=1)
        s.commit()
        of_job = {j.id: j.submission_id for j in grading}
        assert jobs.unpublished(session=s, broker_depth={"cpu": 3}, grace_s=10) == 0
        # The broker lost everything: all three go out again in one pass, Bob's first
        # submission ahead of Ada's second, though only Ada's were overdue.
        assert jobs.unpublished(session=s, broker_depth={"cpu": 0}, grace_s=10) == 3
        assert [of_job[m.job_id] for m in outbox(s)] == [ada1, bob1, ada2]
        s.rollback()
    with session_factory(engine)() as s:  # nothing is due while every message is fresh
        assert jobs.unpublished(session=s, broker_depth={"cpu": 0}, grace_s=600) == 0


def test_exports(world: World, engine: Engine) -> None:
    import csv

    from tests.server.reports import store

    sid = world.submit(world.ada, REFERENCE).json()["id"]
    store(engine, sid)
    url = "/api/courses/th/assignments/t1-multiprocessing/grades.csv"
    assert world.get(world.ada, url).status_code == 403
    rows = list(csv.DictReader(io.StringIO(world.get(world.prof, url).text)))
    by = {r["email"]: r for r in rows}
    assert by["ada@uni.edu"]["best_score"] == "90.0" and by["ada@uni.edu"]["attempts"] == "1"
    assert by["bob@uni.edu"]["attempts"] == "0" and by["bob@uni.edu"]["best_score"] == ""
    assert world.get(world.ada, f"/api/submissions/{sid}/gradescope.json").status_code == 403
    gs = world.get(world.prof, f"/api/submissions/{sid}/gradescope.json").json()
    assert gs["score"] == 90.0 and gs["leaderboard"][0]["value"] == 1.8
    assert sum(t["max_score"] for t in gs["tests"]) == 100
    assert gs["tests"][0]["visibility"] == "after_published"


def test_regrade_is_audited_and_requeued(world: World, engine: Engine) -> None:
    from server.models import AuditLog

    sid = world.submit(world.ada, REFERENCE).json()["id"]
    r = world.post(world.prof, f"/api/submissions/{sid}/regrade")
    assert r.status_code == 202 and r.json()["status"] == "queued"
    r = world.post(world.prof, "/api/courses/th/assignments/t1-multiprocessing/regrade")
    assert r.json() == {"queued": 1}
    with session_factory(engine)() as s:  # behind every student's own submissions
        from server.models import Job

        assert [(j.state, j.priority) for j in s.scalars(select(Job).where(
            Job.submission_id == sid).order_by(Job.id))] == [
            ("superseded", 0), ("superseded", 0), ("queued", 9)]
    assert world.post(world.ada, "/api/courses/th/assignments/t1-multiprocessing/regrade"
                      ).status_code == 403
    with session_factory(engine)() as s:
        actions = [a.action for a in s.scalars(select(AuditLog).order_by(AuditLog.id))]
    assert actions[-2:] == ["submission.regrade", "assignment.regrade_all"]


def test_regrade_supersedes_a_pending_job(world: World) -> None:
    c = world.client
    sid = world.submit(world.ada, REFERENCE).json()["id"]
    first = claim(c)
    assert first is not None
    world.post(world.prof, f"/api/submissions/{sid}/regrade")
    outcome = JobOutcome.model_validate({"report": _graded_report()}).model_dump_json()
    r = c.post(f"/api/runner/jobs/{first['job_id']}/result", content=outcome,
               headers={**RUNNER, "X-Job-Token": first["token"],
                        "Content-Type": "application/json"})
    assert r.status_code == 403  # the superseded job's token no longer counts
    second = claim(c)
    assert second is not None and second["job"]["submission_id"] == sid
    assert claim(c) is None  # exactly one job


def test_browser_session_cookie_and_csrf(world: World) -> None:
    from fastapi.testclient import TestClient

    browser = TestClient(world.client.app)
    r = browser.post("/api/auth/session", json={"email": "ada@uni.edu",
                                                "password": "studentpass1"})
    assert r.status_code == 200
    cookie = r.headers["set-cookie"].lower()
    assert "paragrade_session=" in cookie and "httponly" in cookie and "samesite=lax" in cookie
    csrf = r.json()["csrf_token"]
    assert browser.get("/api/me").json()["email"] == "ada@uni.edu"
    url = "/api/courses/th/assignments/t1-multiprocessing/submissions"
    files = [("files", ("solution.py", REFERENCE))]
    r = browser.post(url, files=files)
    assert r.status_code == 403 and "CSRF" in r.json()["detail"]
    r = browser.post(url, files=files, headers={"X-CSRF-Token": "forged"})
    assert r.status_code == 403
    assert browser.post(url, files=files, headers={"X-CSRF-Token": csrf}).status_code == 201
    assert browser.request("DELETE", "/api/auth/session",
                           headers={"X-CSRF-Token": csrf}).status_code == 204
    assert browser.get("/api/me").status_code == 401


def test_result_with_nul_in_output_is_stored(world: World) -> None:
    c = world.client
    world.submit(world.ada, REFERENCE)
    offer = claim(c)
    assert offer is not None
    report = _graded_report()
    report["tests"][0]["message"] = "printed \x00 a NUL"
    r = c.post(f"/api/runner/jobs/{offer['job_id']}/result",
               content=JobOutcome.model_validate({"report": report}).model_dump_json(),
               headers={**RUNNER, "X-Job-Token": offer["token"],
                        "Content-Type": "application/json"})
    assert r.status_code == 204
    report["scaling"][0]["workers"] = 1 << 40
    r = c.post("/api/runner/jobs/1/result", json={"report": report},
               headers={**RUNNER, "X-Job-Token": offer["token"]})
    assert r.status_code == 422


def test_joining_a_second_course_with_its_code(world: World) -> None:
    code = world.post(world.prof, "/api/courses", json={"slug": "hpc", "title": "HPC"}
                      ).json()["join_code"]
    r = world.post(world.ada, "/api/courses/join", json={"join_code": code, "alias": "ada"})
    assert r.status_code == 200
    assert r.json() == {"slug": "hpc", "title": "HPC", "role": "student", "join_code": None}
    assert {c["slug"] for c in world.get(world.ada, "/api/courses").json()} == {"th", "hpc"}
    assert world.post(world.ada, "/api/courses/join", json={"join_code": "zzzzzz"}
                      ).status_code == 404


def test_a_new_scoring_curve_rescores_stored_grades(world: World, engine: Engine) -> None:
    from runners.protocol import GradeReport
    from server.services.grades import grading
    from tests.server.reports import sample_report

    url = "/api/courses/th/assignments/t1-multiprocessing"
    sid = world.submit(world.ada, REFERENCE).json()["id"]
    with session_factory(engine)() as s:  # speedup 1.8, scored 90 on the runner
        sub = s.get(Submission, sid)
        assert sub is not None
        row = grading.store_report(session=s, sub=sub, report=GradeReport.model_validate(
            sample_report(median=1.8)))
        s.commit()
        assert row.score == 90.0  # the package's own curve: the runner's score stands
    r = world.client.patch(url, json={"speedup_min": 1.2, "speedup_full": 2.4}, headers=world.prof)
    assert r.status_code == 200 and (r.json()["speedup_min"], r.json()["speedup_full"]) == (1.2, 2.4)
    got = world.get(world.ada, f"/api/submissions/{sid}").json()
    assert got["score"] == 80.0  # 60 + 40 × (1.8 − 1.2) / (2.4 − 1.2)
    r = world.client.patch(url, json={"speedup_full": 1.1}, headers=world.prof)
    assert r.status_code == 422 and "must be above" in r.json()["detail"]
    assert world.get(world.ada, f"/api/submissions/{sid}").json()["score"] == 80.0  # unchanged
    assert world.client.patch(url, json={"speedup_min": 1.5}, headers=world.ada).status_code == 403


def test_a_runner_of_another_protocol_is_refused_at_hello(world: World) -> None:
    from runners.protocol import PROTOCOL_VERSION

    hello = {"name": "old", "queues": ["cpu"], "backend": "bwrap", "cores": 1, "memory_mb": 1}
    r = world.client.post("/api/runner/hello", json={**hello, "protocol_version": 1},
                          headers=RUNNER)
    assert r.status_code == 409 and "protocol 1" in r.json()["detail"], r.text
    r = world.client.post("/api/runner/hello", json={**hello, "protocol_version": PROTOCOL_VERSION},
                          headers=RUNNER)
    assert r.status_code == 204, r.text


def test_the_staff_list_reads_a_few_queries_however_many_submissions(world: World,
                                                                      engine: Engine) -> None:
    """A deadline night's list: its queries do not grow with the submissions (each one's latest
    job, queue position and what its queue waits for are read for the whole list at once), and
    each entry says what the submission's own page says."""
    from sqlalchemy import event

    c = world.client
    c.patch("/api/courses/th/assignments/t1-multiprocessing", json={"quota_count": 50},
            headers=world.prof)
    url = "/api/courses/th/assignments/t1-multiprocessing/submissions"
    statements: list[str] = []

    def counted(*args: Any) -> None:
        statements.append(str(args[2]))

    def listed() -> tuple[int, list[dict[str, Any]]]:
        statements.clear()
        event.listen(engine, "before_cursor_execute", counted)
        try:
            r = c.get(url, headers=world.prof)
        finally:
            event.remove(engine, "before_cursor_execute", counted)
        assert r.status_code == 200, r.text
        return len(statements), r.json()

    for i in range(3):
        for who in (world.ada, world.bob):
            assert world.submit(who, REFERENCE + f"\n# {i}\n".encode()).status_code == 201
    few, rows = listed()
    for i in range(3, 12):
        for who in (world.ada, world.bob):
            assert world.submit(who, REFERENCE + f"\n# {i}\n".encode()).status_code == 201
    many, rows = listed()
    assert len(rows) == 24 and many == few, (few, many)
    for row, who in ((rows[0], world.bob), (rows[-1], world.ada)):
        own = world.get(who, f"/api/submissions/{row['id']}").json()
        assert (row["queue_position"], row["waiting_for"], row["queue"]) == \
            (own["queue_position"], own["waiting_for"], own["queue"]) and own["queue_position"]
    assert [r["queue_position"] for r in rows] == list(range(24, 0, -1))  # newest last in line
