"""A user's whole path through a real server and a real runner (uvicorn + worker, bwrap)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from runners import worker
from server import migrate
from server.db import make_engine, session_factory
from server.main import create_app
from server.services import users
from server.settings import REPO_ROOT, ServerSettings
from tests.server.conftest import REFERENCE, bearer

pytestmark = pytest.mark.slow
WRONG = b"def parallel_sum(n, chunks, workers=2):\n    return 0.001 * n * n / 2\n"


@pytest.fixture
def live_server(tmp_path: Path) -> Iterator[tuple[str, ServerSettings]]:
    url = f"sqlite:///{tmp_path / 'e2e.db'}"
    migrate.upgrade(url)
    settings = ServerSettings(database_url=url, artifacts_dir=tmp_path / "artifacts",
                              assignments_dir=REPO_ROOT / "assignments",
                              runner_token="runner-secret-1234")
    with session_factory(make_engine(url))() as s, s.begin():
        users.create(session=s, email="prof@uni.edu", name="Prof", password="profpass123",
                     is_instructor=True)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", settings
    server.should_exit = True
    thread.join(10)


def test_submit_reference_and_wrong_then_ranked(live_server: tuple[str, ServerSettings]) -> None:
    import httpx

    base, settings = live_server
    c = httpx.Client(base_url=base, timeout=60)
    prof = bearer(c.post("/api/auth/token", json={"email": "prof@uni.edu",
                                                  "password": "profpass123"}).json()["token"])
    code = c.post("/api/courses", json={"slug": "th", "title": "TH"}, headers=prof).json()["join_code"]
    assert c.post("/api/courses/th/assignments/import", headers=prof,
                  json={"path": "treasure-hunt/t1-multiprocessing"}).status_code == 201
    c.post("/api/auth/register", json={"email": "ada@uni.edu", "name": "Ada", "alias": "ada",
                                       "password": "adapass123", "join_code": code})
    ada = bearer(c.post("/api/auth/token", json={"email": "ada@uni.edu",
                                                 "password": "adapass123"}).json()["token"])
    url = "/api/courses/th/assignments/t1-multiprocessing/submissions"
    good = c.post(url, files=[("files", ("solution.py", REFERENCE))], headers=ada).json()["id"]
    bad = c.post(url, files=[("files", ("solution.py", WRONG))], headers=ada).json()["id"]

    graded = worker.run(server=base, token=settings.runner_token, queues=["cpu"], name="t",
                        once=True)
    assert graded == 3  # the import's validation, then the two gradings
    t1 = c.get("/api/courses/th/assignments/t1-multiprocessing", headers=prof).json()
    assert t1["validation"] == "ready", t1["checks"]

    g = c.get(f"/api/submissions/{good}", headers=ada).json()
    b = c.get(f"/api/submissions/{bad}", headers=ada).json()
    assert (g["status"], g["verdict"]) == ("graded", "passed")
    assert g["report"]["speedup"]["median"] > 1.0
    assert (b["status"], b["verdict"]) == ("graded", "failed")
    assert all("wrong answer" in t["message"] for t in b["report"]["tests"]
               if t["hidden"] and t["outcome"] == "failed")
    board = c.get("/api/courses/th/assignments/t1-multiprocessing/leaderboard", headers=ada).json()
    assert [(e["alias"], e["rank"], e["submission_id"]) for e in board] == [("ada", 1, good)]
