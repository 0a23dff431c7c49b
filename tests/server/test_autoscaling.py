"""Runners that follow the queue, the server's side: the scaler's rule and its file, a pilot's
credential that ends, a job handed back by a leaving runner, what /fleet and a waiting student
see. The pilots themselves, on a real SLURM cluster: tests/test_autoscale.py."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from server.models import Job, QueueScale, Submission, now
from server.services.fleet import autoscaling, runner_credentials
from tests.server.conftest import World
from tests.server.test_pages import browser
from tests.server.test_security_runners import as_runner, hello, submit_one

pytestmark = pytest.mark.concurrent


def policy(**kw: int) -> autoscaling.QueuePolicy:
    return autoscaling.QueuePolicy.model_validate({"max": 4, **kw})


def test_the_rule_grows_at_once_and_shrinks_after_the_delay() -> None:
    qp = policy(min=1, max=4, jobs_per_runner=2)
    assert autoscaling.needed(policy=qp, queued=0, running=0, static=0)[0] == 1  # the minimum
    n, why = autoscaling.needed(policy=qp, queued=5, running=2, static=0)
    assert n == 4 and why == "7 jobs (5 waiting, 2 running), 2 per runner: 4 pilots"
    n, why = autoscaling.needed(policy=qp, queued=40, running=0, static=0)
    assert n == 4 and "20 wanted, the maximum is 4" in why
    # An operator's fixed runners serve first: pilots only for the rest.
    assert autoscaling.needed(policy=qp, queued=5, running=2, static=3)[0] == 1
    assert autoscaling.needed(policy=policy(max=4), queued=1, running=0, static=3)[0] == 0
    hold = autoscaling.Hold(window_s=60)
    assert [hold.add(t, n) for t, n in ((0, 4), (30, 1), (59, 0), (61, 0), (95, 2))] == \
        [4, 4, 4, 1, 2]  # the peak of 4 kept for 60 s, then the largest of the last 60 s


def test_the_fleet_file_says_what_is_wrong(tmp_path: Path) -> None:
    f = tmp_path / "fleet.toml"
    for text, words in (
            ('state_dir = "/x"\n[queues.cpu]\nmin = 3\nmax = 2\n', "min (3) is more than max (2)"),
            ('state_dir = "/x"\n[queues.fpga]\nmax = 2\n', "queues.fpga"),
            ('state_dir = "/x"\n[queues.cpu]\nmax = 2\ndrain_s = 4000\n',
             "drain_s (4000) must be less than time_limit_s (3600)"),
            ('state_dir = "/x"\n[queues.cpu]\nmax = 2\nmaxx = 3\n', "queues.cpu.maxx"),
            ("queues = [", "not TOML")):
        f.write_text(text)
        with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
            autoscaling.load_policy(f)
    f.write_text('state_dir = "/shared/pilots"\n[queues.gpu]\nmax = 2\nsbatch = ["--gres=gpu:1"]\n')
    p = autoscaling.load_policy(f)
    assert p.queues["gpu"].sbatch == ["--gres=gpu:1"] and p.pilot_prefix("gpu") == \
        "paragrade-pilot-gpu-"


def test_a_pilots_credential_serves_its_queue_until_it_ends(world: World) -> None:
    c = world.client
    with c.app.state.sessions() as s, s.begin():  # type: ignore[attr-defined]
        secret = runner_credentials.add_pilot(session=s, name="paragrade-pilot-cpu-0a1b", queue="cpu",
                                          expires_at=now() + timedelta(hours=1))
    r = c.post("/api/runner/hello", json=hello("paragrade-pilot-cpu-0a1b", ("cpu", "gpu")),
               headers=as_runner(secret))
    assert r.status_code == 403 and "does not serve the gpu queue" in r.json()["detail"]
    assert c.post("/api/runner/hello", json=hello("paragrade-pilot-cpu-0a1b"),
                  headers=as_runner(secret)).status_code == 204
    with c.app.state.sessions() as s, s.begin():  # type: ignore[attr-defined]
        runner_credentials.expire(session=s, name="paragrade-pilot-cpu-0a1b",
                              at=now() - timedelta(seconds=1))
    r = c.post("/api/runner/hello", json=hello("paragrade-pilot-cpu-0a1b"),
               headers=as_runner(secret))
    assert r.status_code == 401 and "credential expired" in r.json()["detail"], r.text


def test_a_job_handed_back_is_queued_again_and_its_attempt_not_counted(world: World) -> None:
    c = world.client
    with c.app.state.sessions() as s, s.begin():  # type: ignore[attr-defined]
        secret = runner_credentials.add(session=s, name="pilot-x", queues=["cpu"])
    jid = submit_one(world)
    offer = c.post(f"/api/runner/jobs/{jid}/claim", params={"runner": "pilot-x"},
                   headers=as_runner(secret)).json()
    job_headers = {**as_runner(secret), "X-Job-Token": offer["token"]}
    # Another process of the same runner cannot give it back: the job answers its claimer.
    r = c.post(f"/api/runner/jobs/{jid}/release", json={"reason": "leaving"},
               headers={**job_headers, "X-Runner-Key": "another-process-key-000000"})
    assert r.status_code == 403
    r = c.post(f"/api/runner/jobs/{jid}/release", json={"reason": ""}, headers=job_headers)
    assert r.status_code == 422  # a reason is required
    r = c.post(f"/api/runner/jobs/{jid}/release",
               json={"reason": "the runner's allocation ends in 40 s"}, headers=job_headers)
    assert r.status_code == 204, r.text
    with c.app.state.sessions() as s:  # type: ignore[attr-defined]
        job = s.get(Job, jid)
        sub = s.get(Submission, job.submission_id)
        assert (job.state, job.attempts, job.runner, sub.status) == ("queued", 0, None, "queued")
    # Its secret is void now; the next runner claims it afresh.
    r = c.post(f"/api/runner/jobs/{jid}/result", json={"platform_error": "x"}, headers=job_headers)
    assert r.status_code == 403
    again = c.post(f"/api/runner/jobs/{jid}/claim", params={"runner": "pilot-x"},
                   headers=as_runner(secret))
    assert again.status_code == 200 and again.json()["job_id"] == jid


def test_the_fleet_and_a_waiting_student_see_the_scalers_plan(world: World) -> None:
    c = world.client
    r = world.submit(world.ada, b"def find(*a, **k):\n    return 0\n")
    sid = r.json()["id"]
    ada, prof = browser(world), browser(world, "prof@uni.edu", "prof-pass-4821")
    page = ada.get(f"/s/{sid}")
    assert "waiting for a runner" in page.text
    with c.app.state.sessions() as s, s.begin():  # type: ignore[attr-defined]
        s.add(QueueScale(queue="cpu", desired=1, pending=1, running=0, start_s=23.0,
                         reason="1 job (1 waiting, 0 running): 1 pilot", updated_at=now()))
    page = ada.get(f"/s/{sid}")
    assert "starting a runner, about 25 s" in page.text, page.text
    cpu = c.get("/api/fleet", headers=world.prof).json()["queues"]["cpu"]
    assert cpu["scale"]["desired"] == 1 and cpu["scale"]["pending"] == 1
    assert "1 pilot" in cpu["scale"]["reason"]
    assert "1 job (1 waiting, 0 running): 1 pilot" in prof.get("/fleet").text
    with c.app.state.sessions() as s, s.begin():  # type: ignore[attr-defined]
        row = s.scalar(select(QueueScale))
        row.updated_at = now() - timedelta(minutes=10)  # the scaler stopped: no plan shown
    assert "waiting for a runner" in ada.get(f"/s/{sid}").text
    assert c.get("/api/fleet", headers=world.prof).json()["queues"]["cpu"]["scale"] is None
