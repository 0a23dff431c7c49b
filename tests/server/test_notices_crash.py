"""The e-mail outbox across a crash: `paragrade serve` killed with SIGKILL after a grade landed
and before its e-mail left sends that e-mail once when it is back, to a real SMTP server."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx

from runners.protocol import JobOutcome
from server.settings import REPO_ROOT
from tests.server.conftest import REFERENCE
from tests.server.live import free_port, serve_env, wait_until
from tests.server.reports import sample_report
from tests.server.smtp import MailServer
from tests.server.test_crashes import _serving

URL = "/api/courses/treasure-hunt/assignments/t1-multiprocessing/submissions"
RUNNER = {"Authorization": "Bearer runner-secret-1234", "X-Runner-Key": "crash-runner-key-0123456789"}
PASSWORD = "orchid-lantern-gravel-41"


def test_a_server_killed_between_a_grade_and_its_email_sends_it_once(tmp_path: Path) -> None:
    smtp = MailServer().start()
    try:
        made = subprocess.run([sys.executable, "-m", "paragrade.cli", "admin",
                               "create-instructor", "prof@uni.edu", "--password", PASSWORD],
                              env=serve_env(tmp_path), cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=300)
        assert made.returncode == 0, made.stderr
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        env = {**smtp.env(), "PARAGRADE_SERVER_RUNNER_TOKEN": "runner-secret-1234",
               "PARAGRADE_SERVER_PUBLIC_URL": base}
        # The first life's sender never wakes: the kill comes between the grade and the send.
        with _serving(tmp_path, port, **env, PARAGRADE_SERVER_MAIL_POLL_S="3600") as serve:
            http = httpx.Client(base_url=base, timeout=30)
            token = http.post("/api/auth/token", json={"email": "prof@uni.edu",
                                                       "password": PASSWORD}).json()["token"]
            prof = {"Authorization": f"Bearer {token}"}
            r = http.put("/api/notifications/settings", headers=prof, json={"grade_wait_s": 0})
            assert r.status_code == 200, r.text
            r = http.post(URL, headers=prof, files=[("files", ("solution.py", REFERENCE))])
            assert r.status_code == 201, r.text
            sid = r.json()["id"]
            with sqlite3.connect(tmp_path / "p.db") as db:
                (job_id,) = db.execute("SELECT id FROM jobs WHERE submission_id = ?",
                                       (sid,)).fetchone()
            offer = http.post(f"/api/runner/jobs/{job_id}/claim", params={"runner": "crash"},
                              headers=RUNNER)
            assert offer.status_code == 200, offer.text
            done = http.post(f"/api/runner/jobs/{job_id}/result",
                             content=JobOutcome.model_validate(
                                 {"report": sample_report()}).model_dump_json(),
                             headers={**RUNNER, "X-Job-Token": offer.json()["token"],
                                      "Content-Type": "application/json"})
            assert done.status_code == 204, done.text
            assert http.get("/api/notifications", headers=prof).json()["unread"] == 1
            http.close()
            serve.kill()  # SIGKILL: no shutdown, nothing flushed
        assert smtp.messages == []
        with _serving(tmp_path, port, **env, PARAGRADE_SERVER_MAIL_POLL_S="0.2"):
            wait_until("the e-mail", lambda: smtp.messages, 30)
            time.sleep(2)  # a second send would have come by now
        assert len(smtp.messages) == 1
        (msg,) = smtp.messages
        assert msg["To"] == "prof@uni.edu" and f"{base}/s/{sid}" in msg.get_content()
    finally:
        smtp.stop()
