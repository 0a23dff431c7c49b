"""Runners' own credentials, against the real server: a runner serves under its credential's name
and on its queues only; a revoked credential is refused at once, mid-job too; secrets are kept
as hashes; the operators' commands say what is wrong in plain words.

Before these, every runner presented one fleet token: its holder could claim any queued job under
any name (and so read hidden tests and submissions, and report what it liked for them)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select
from typer.testing import CliRunner

from runners.fleet import claimed, runner
from runners.protocol import JobOffer, RunnerHello
from server import security
from server.db import Base, session_factory
from server.main import create_app
from server.models import Job, RunnerCredential, Submission
from server.services.fleet import runner_credentials
from server.settings import DEV_SECRET, REPO_ROOT, ServerSettings, get_settings
from tests.server.conftest import RUNNER, World, bearer

KEY = "node-process-key-0123456789"


def issue(client: TestClient, name: str, queues: tuple[str, ...] = ("cpu", "mpi")) -> str:
    """An operator's `paragrade admin runner add NAME --queues …`, through the service."""
    with client.app.state.sessions() as s, s.begin():  # type: ignore[attr-defined]
        return runner_credentials.add(session=s, name=name, queues=list(queues))


def revoke(client: TestClient, name: str) -> int:
    with client.app.state.sessions() as s, s.begin():  # type: ignore[attr-defined]
        return runner_credentials.revoke(session=s, name=name, max_attempts=3)


def as_runner(secret: str, key: str = KEY) -> dict[str, str]:
    return {**bearer(secret), "X-Runner-Key": key}


def hello(name: str, queues: tuple[str, ...] = ("cpu",)) -> dict[str, object]:
    return {"name": name, "queues": list(queues), "backend": "bwrap", "cores": 2,
            "memory_mb": 1024}


def queued(client: TestClient, queue: str) -> int:
    with client.app.state.sessions() as s:  # type: ignore[attr-defined]
        job_id = s.scalar(select(Job.id).where(Job.state == "queued", Job.queue == queue)
                          .order_by(Job.id).limit(1))
    assert job_id is not None, f"no queued {queue} job"
    return int(job_id)


def submit_one(world: World) -> int:
    r = world.submit(world.ada, b"def find(*a, **k):\n    return 0\n")
    assert r.status_code == 201, r.text
    return queued(world.client, "cpu")


def test_a_runner_serves_only_under_its_credentials_name(world: World) -> None:
    c = world.client
    a, b = issue(c, "node-a"), issue(c, "node-b")
    jid = submit_one(world)
    # Hello and claim under another runner's name, or a name of one's own choosing: refused.
    r = c.post("/api/runner/hello", json=hello("node-b"), headers=as_runner(a))
    assert r.status_code == 403 and "runner node-a's credential" in r.json()["detail"]
    for name in ("node-b", "somebody"):
        r = c.post(f"/api/runner/jobs/{jid}/claim", params={"runner": name}, headers=as_runner(a))
        assert r.status_code == 403 and "cannot act as" in r.json()["detail"], r.text
    # The fleet token cannot take a name a credential holds either.
    r = c.post(f"/api/runner/jobs/{jid}/claim", params={"runner": "node-a"}, headers=RUNNER)
    assert r.status_code == 403 and "belongs to a runner credential" in r.json()["detail"]
    r = c.post("/api/runner/hello", json=hello("node-a"), headers=RUNNER)
    assert r.status_code == 403
    # Under its own name it works; the job stayed queued through the refusals.
    assert c.post("/api/runner/hello", json=hello("node-a"),
                  headers=as_runner(a)).status_code == 204
    r = c.post(f"/api/runner/jobs/{jid}/claim", params={"runner": "node-a"}, headers=as_runner(a))
    assert r.status_code == 200, r.text
    offer = JobOffer.model_validate(r.json())
    fleet = c.get("/api/fleet", headers=world.prof).json()
    assert [x["name"] for x in fleet["runners"]] == ["node-a"]
    # Another runner holding node-a's leaked job secret and process key still cannot touch it,
    # nor can the fleet token.
    for leaked in ({**as_runner(b), "X-Job-Token": offer.token},
                   {**RUNNER, "X-Runner-Key": KEY, "X-Job-Token": offer.token}):
        for method, path in (("GET", "bundle"), ("GET", "submission"), ("POST", "heartbeat")):
            r = c.request(method, f"/api/runner/jobs/{jid}/{path}", headers=leaked)
            assert r.status_code == 403 and "another runner" in r.json()["detail"], (path, r.text)
    r = c.post(f"/api/runner/jobs/{jid}/result", json={"platform_error": "forged"},
               headers=leaked)
    assert r.status_code == 403
    mine = {**as_runner(a), "X-Job-Token": offer.token}
    assert c.get(f"/api/runner/jobs/{jid}/bundle", headers=mine).status_code == 200


def test_a_cpu_credential_cannot_claim_a_gpu_job(world: World) -> None:
    c = world.client
    cpu, gpu = issue(c, "cpu-node", ("cpu", "mpi")), issue(c, "gpu-node", ("gpu",))
    r = c.post("/api/courses/th/assignments/import", json={"path": "treasure-hunt/t3-cuda"},
               headers=world.prof)
    assert r.status_code == 201, r.text
    jid = queued(c, "gpu")  # the package's validation runs on a GPU runner
    r = c.post(f"/api/runner/jobs/{jid}/claim", params={"runner": "cpu-node"},
               headers=as_runner(cpu))
    assert r.status_code == 403, r.text
    assert r.json()["detail"] == ("runner cpu-node does not serve the gpu queue (its "
                                  "credential and its hello give it cpu, mpi)")
    # Nor may it announce the queue: its runner is refused at start.
    r = c.post("/api/runner/hello", json=hello("cpu-node", ("cpu", "gpu")),
               headers=as_runner(cpu))
    assert r.status_code == 403 and "does not serve the gpu queue" in r.json()["detail"]
    with c.app.state.sessions() as s:  # type: ignore[attr-defined]
        job = s.get(Job, jid)
        assert job is not None and (job.state, job.runner, job.attempts) == ("queued", None, 0)
    r = c.post(f"/api/runner/jobs/{jid}/claim", params={"runner": "gpu-node"},
               headers=as_runner(gpu))
    assert r.status_code == 200 and r.json()["validate_job"]["queue"] == "gpu"


def test_a_revoked_credential_is_refused_at_once_even_mid_job(world: World) -> None:
    c = world.client
    secret = issue(c, "node-a")
    jid = submit_one(world)
    r = c.post(f"/api/runner/jobs/{jid}/claim", params={"runner": "node-a"},
               headers=as_runner(secret))
    assert r.status_code == 200
    mine = {**as_runner(secret), "X-Job-Token": r.json()["token"]}
    assert c.post(f"/api/runner/jobs/{jid}/heartbeat", headers=mine).status_code == 204

    assert revoke(c, "node-a") == 1  # the job it held goes back to the queue
    for method, path in (("POST", "heartbeat"), ("GET", "bundle"), ("GET", "submission")):
        r = c.request(method, f"/api/runner/jobs/{jid}/{path}", headers=mine)
        assert r.status_code == 401, (path, r.text)
        assert re.fullmatch(r"runner node-a's credential was revoked on \S+ \S+ UTC; ask the "
                            r"operators for a new one", r.json()["detail"]), r.text
    r = c.post(f"/api/runner/jobs/{jid}/result", json={"platform_error": "late"}, headers=mine)
    assert r.status_code == 401
    assert c.post("/api/runner/hello", json=hello("node-a"),
                  headers=as_runner(secret)).status_code == 401
    with c.app.state.sessions() as s:  # type: ignore[attr-defined]
        job, sub = s.get(Job, jid), s.scalar(select(Submission))
        assert job is not None and sub is not None
        assert (job.state, job.token_hash, job.runner) == ("queued", None, None)
        assert sub.status == "queued" and not sub.counts_for_quota  # never the student's
    # Another runner grades it; the revoked one's name can be issued again with a new secret.
    other = issue(c, "node-b")
    r = c.post(f"/api/runner/jobs/{jid}/claim", params={"runner": "node-b"},
               headers=as_runner(other))
    assert r.status_code == 200
    again = issue(c, "node-a")
    assert again != secret
    assert c.post("/api/runner/hello", json=hello("node-a"),
                  headers=as_runner(secret)).status_code == 401
    assert c.post("/api/runner/hello", json=hello("node-a"),
                  headers=as_runner(again)).status_code == 204


def test_a_revoked_runner_stops_the_job_it_grades_and_then_itself(world: World) -> None:
    """The runner's own code against the server: its lease sees the revocation at the next
    heartbeat and stops the grading; its hello is refused with the server's reason."""
    c = world.client
    secret = issue(c, "node-a")
    jid = submit_one(world)
    client = TestClient(c.app, headers=as_runner(secret))
    offer = JobOffer.model_validate(client.post(f"/api/runner/jobs/{jid}/claim",
                                                params={"runner": "node-a"}).json())
    threading.Timer(0.3, revoke, (c, "node-a")).start()
    started = time.monotonic()
    with pytest.raises(claimed.JobCancelled), claimed.lease(client, offer, every_s=0.1):
        time.sleep(20)  # a long grading, interrupted
    assert time.monotonic() - started < 5
    me = RunnerHello(name="node-a", queues=["cpu"], backend="bwrap", cores=2, memory_mb=1024)
    with pytest.raises(runner.Refused, match="node-a's credential was revoked"):
        runner.greet(client, me)


def test_a_runner_refused_at_start_is_told_why(world: World) -> None:
    c = world.client
    secret = issue(c, "node-a", ("cpu",))
    client = TestClient(c.app, headers=as_runner(secret))
    for name, queues, why in (("node-b", ["cpu"], "it cannot act as 'node-b'"),
                              ("node-a", ["cpu", "gpu"], "does not serve the gpu queue")):
        me = RunnerHello(name=name, queues=queues, backend="bwrap", cores=2, memory_mb=1024)
        with pytest.raises(runner.Refused, match=re.escape(why)):
            runner.greet(client, me)
    stranger = TestClient(c.app, headers=as_runner("not-a-credential-at-all"))
    with pytest.raises(runner.Refused, match="not a runner credential"):
        runner.greet(stranger, RunnerHello(name="x", queues=["cpu"], backend="bwrap", cores=1,
                                           memory_mb=1))


def test_secrets_are_kept_as_hashes_only(world: World, engine: Engine) -> None:
    c = world.client
    secret = issue(c, "node-a")
    jid = submit_one(world)
    c.post(f"/api/runner/jobs/{jid}/claim", params={"runner": "node-a"},
           headers=as_runner(secret))
    with session_factory(engine)() as s:
        dump = repr([list(row) for table in Base.metadata.sorted_tables
                     for row in s.execute(select(table))])
        row = s.get(RunnerCredential, "node-a")
        assert row is not None and len(row.token_hash) == 64
    assert "node-a" in dump and secret not in dump and KEY not in dump


def test_production_accepts_the_fleet_token_only_where_it_is_set(tmp_path: Path,
                                                                 engine: Engine) -> None:
    base = {"environment": "production", "secret_key": "k" * 40, "database_url": "sqlite://",
            "artifacts_dir": tmp_path, "assignments_dir": REPO_ROOT / "assignments",
            "broker_url": "memory://"}
    off = ServerSettings(**base)  # type: ignore[arg-type]
    assert off.runner_token is None
    assert ServerSettings(**base, runner_token="").runner_token is None  # type: ignore[arg-type]
    with TestClient(create_app(off, engine)) as c:
        for token in (DEV_SECRET, "", "None", "runner-secret-1234"):
            r = c.post("/api/runner/hello", json=hello("n"), headers=as_runner(token))
            assert r.status_code == 401, (token, r.text)
        secret = issue(c, "node-a")
        assert c.post("/api/runner/hello", json=hello("node-a"),
                      headers=as_runner(secret)).status_code == 204
    on = ServerSettings(**base, runner_token="f" * 40)  # type: ignore[arg-type]
    with TestClient(create_app(on, engine)) as c:
        assert c.post("/api/runner/hello", json=hello("n"),
                      headers=as_runner("f" * 40)).status_code == 204


# --- the operators' commands ------------------------------------------------------------------


@pytest.fixture
def admin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[CliRunner]:
    """`paragrade admin …` over a database of its own."""
    monkeypatch.setenv("PARAGRADE_SERVER_DATABASE_URL", f"sqlite:///{tmp_path / 'db.sqlite'}")
    monkeypatch.setenv("PARAGRADE_SERVER_ARTIFACTS_DIR", str(tmp_path / "artifacts"))
    monkeypatch.setenv("PARAGRADE_SERVER_BROKER_URL", "memory://")
    get_settings.cache_clear()
    yield CliRunner()
    get_settings.cache_clear()


def _admin(cli: CliRunner, *args: str) -> tuple[int, str]:
    from paragrade.cli import app

    r = cli.invoke(app, ["admin", "runner", *args], env={"COLUMNS": "200"})
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r.exit_code, r.output


def test_runner_add_list_revoke_say_what_is_wrong_in_plain_words(admin: CliRunner,
                                                                  tmp_path: Path) -> None:
    code, out = _admin(admin, "add", "gpu-1", "--queues", "gpu")
    assert code == 0, out
    secret = next(line for line in out.splitlines() if re.fullmatch(r"[A-Za-z0-9_-]{43}", line))
    stored = b"".join(f.read_bytes() for f in tmp_path.glob("db.sqlite*"))  # its WAL too
    assert security.token_hash(secret).encode() in stored and secret.encode() not in stored
    assert "PARAGRADE_RUNNER_TOKEN=<the secret> paragrade runner --name gpu-1 --queues gpu" in out
    for args, code_, message in (
            (("add", "gpu-1"), 2, "error: runner gpu-1 already has a credential: revoke it "
                                  "first (paragrade admin runner revoke gpu-1)"),
            (("add", "bad name"), 2, "error: 'bad name' is not a runner name"),
            (("add", "-x"), 2, "No such option"),
            (("add", "n1", "--queues", "cpu,tpu"), 2, "error: unknown queue(s) tpu: use cpu, "
                                                      "mpi, gpu, mpinodes"),
            (("add", "n1", "--queues", ","), 2, "unknown queue(s) (none given)"),
            (("revoke", "nobody"), 2, "error: no runner credential named 'nobody' "
                                      "(paragrade admin runner list)"),
            (("revoke", "gpu-1"), 0, "runner gpu-1's credential is revoked"),
            (("revoke", "gpu-1"), 2, "error: runner gpu-1's credential is already revoked")):
        got, out = _admin(admin, *args)
        assert got == code_ and message in " ".join(out.split()), (args, out)
        assert "Traceback" not in out and secret not in out
    code, out = _admin(admin, "list")
    assert code == 0 and re.search(r"gpu-1\s.*gpu\s.*revoked \d{4}-\d\d-\d\d \d\d:\d\d\s.*never",
                                   out), out
    assert "n1" not in out  # refused, so never issued


def test_production_serve_without_a_fleet_token_wants_runners_of_their_own(
        admin: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    from paragrade.cli import app

    monkeypatch.setenv("PARAGRADE_SERVER_ENVIRONMENT", "production")
    monkeypatch.setenv("PARAGRADE_SERVER_SECRET_KEY", "k" * 40)
    get_settings.cache_clear()
    r = admin.invoke(app, ["serve"], env={"COLUMNS": "200"})
    out = " ".join(r.output.split())
    assert r.exit_code == 2 and "Traceback" not in out, r.output
    assert ("the local runner needs the fleet token, which is off" in out
            and "--no-runner" in out and "paragrade admin runner add NAME" in out), out
