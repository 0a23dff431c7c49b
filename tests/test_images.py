"""The deployment path for real: both images built from the Dockerfiles, the compose stack up,
submissions graded inside it.

`scripts/build-images.sh` builds paragrade/server and paragrade/runner-cpu with podman (layers
cached between runs on one machine; the Debian base made with mmdebstrap where no registry
answers). The stack is docker-compose.yml itself, started by docker-compose against podman's
Docker API, with containers/compose.host-services.yml pointing it at this machine's PostgreSQL and
Redis (their official images cannot be pulled here). The runner container starts every sandbox
as a sibling container through the engine's socket, as in production.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import secrets
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from runners.protocol import PROTOCOL_VERSION
from runners.settings import REPO_ROOT, get_settings
from tests import podman
from tests.server.conftest import zip_of
from tests.server.live import free_port, wait_until

pytestmark = [pytest.mark.images, pytest.mark.slow]

T1 = REPO_ROOT / "assignments" / "treasure-hunt" / "t1-multiprocessing"
PG = "127.0.0.1:5432"
SCRATCH = Path("/var/lib/paragrade/scratch")  # docker-compose.yml: the same path on both sides
PROF = ("prof@uni.edu", "correct horse battery staple")

METRICS_TOKEN = "scraper-" + "0123456789abcdef"


def _engine(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], env=podman.environment(), capture_output=True,
                          text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def images() -> dict[str, dict[str, Any]]:
    """Both images built (a no-op when nothing changed); `podman image inspect` of each."""
    podman.skip_unless_rootful_podman()
    podman.wait_for_early_build(1500)  # started with the session (tests/conftest.py)
    build = subprocess.run(["bash", str(podman.BUILD_IMAGES)],
                           env=podman.environment(), capture_output=True, text=True,
                           timeout=1500, check=False)
    assert build.returncode == 0, f"build-images.sh failed:\n{build.stderr[-6000:]}"
    found = {}
    for name in ("server", "runner-cpu"):
        r = _engine("image", "inspect", f"paragrade/{name}:latest")
        assert r.returncode == 0, r.stderr
        found[name] = json.loads(r.stdout)[0]
    return found


def test_built_images_say_what_they_serve(images: dict[str, dict[str, Any]]) -> None:
    for name, role, queues in (("server", "server", None), ("runner-cpu", "runner", "cpu,mpi")):
        labels = images[name]["Config"]["Labels"]
        assert labels["io.paragrade.role"] == role
        assert labels.get("io.paragrade.queues") == queues
        assert labels["io.paragrade.protocol"] == str(PROTOCOL_VERSION)
    server = images["server"]["Config"]
    assert server["User"] == "paragrade"  # the API never runs as root
    # podman's inspect has it at the top, Docker's in Config
    health = images["server"].get("Healthcheck") or server.get("Healthcheck")
    assert health["Test"][-1].endswith("/readyz')")


def _freeze(argv: list[str]) -> tuple[str, dict[str, str]]:
    """(Python version, {package: version}) of a runtime, as its own Python reports them."""
    script = ("import json, platform, importlib.metadata as m; print(json.dumps([platform."
              "python_version(), {d.metadata['Name'].lower(): d.version for d in m.distributions()"
              " if d.metadata['Name'].lower() not in ('pip', 'setuptools', 'wheel')}]))")
    r = subprocess.run([*argv, "-I", "-c", script], capture_output=True, text=True, timeout=120,
                       env=podman.environment(), check=False)
    assert r.returncode == 0, r.stderr
    version, packages = json.loads(r.stdout)
    return version, packages


def test_the_runner_image_runtime_is_the_bwrap_runtime(images: dict[str, dict[str, Any]]) -> None:
    """Same Python, same version of every package the bwrap runtime has; the image adds only
    what the lock pins for it alone (Ray and what Ray needs)."""
    runtime = get_settings().runtime_dir / "bin" / "python"
    if not runtime.exists():
        pytest.skip("no bwrap runtime here (scripts/setup.sh builds it)")
    host_py, host = _freeze([str(runtime)])
    image_py, image = _freeze(["podman", "run", "--rm", "--network", "none", "--entrypoint",
                               "/opt/paragrade/runtime/bin/python", "paragrade/runner-cpu:latest"])
    assert image_py == host_py
    assert {k: image.get(k) for k in host} == host
    lock = {}
    for line in (REPO_ROOT / "runners" / "runtime-lock.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            lock[name.lower().replace("_", "-")] = version
    extra = {k.replace("_", "-"): v for k, v in image.items() if k not in host}
    assert "ray" in extra
    assert all(lock.get(k) == v for k, v in extra.items()), extra


@dataclass
class Stack:
    base: str
    http: httpx.Client
    compose: list[str]
    env: dict[str, str]

    def login(self, email: str, password: str) -> dict[str, str]:
        r = self.http.post("/api/auth/token", json={"email": email, "password": password})
        assert r.status_code == 200, r.text
        return {"Authorization": f"Bearer {r.json()['token']}"}

    def get(self, who: dict[str, str], url: str) -> Any:
        r = self.http.get(url, headers=who)
        assert r.status_code == 200, r.text
        return r.json()

    def wait(self, what: str, predicate: Any, timeout: float) -> Any:
        """wait_until, with the containers' logs when it times out."""
        try:
            return wait_until(what, predicate, timeout, 0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.logs()}") from None

    def logs(self) -> str:
        r = subprocess.run([*self.compose, "logs", "--no-color", "--tail", "80"], env=self.env,
                           capture_output=True, text=True, timeout=60, check=False)
        return r.stdout[-8000:]


def _psql(sql: str) -> None:
    import psycopg

    with psycopg.connect(f"postgresql://root@{PG}/postgres", autocommit=True) as conn:
        conn.execute(sql.encode())


@pytest.fixture(scope="module")
def stack(images: dict[str, dict[str, Any]],
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """docker-compose up of the server and the CPU runner; down and dropped afterwards."""
    compose_bin = shutil.which("docker-compose")
    if compose_bin is None:
        pytest.skip("docker-compose is not installed (scripts/setup.sh installs it)")
    import redis

    try:
        redis.Redis.from_url("redis://127.0.0.1:6379/0", socket_connect_timeout=1).ping()
        _psql("SELECT 1")
    except Exception as exc:
        pytest.skip(f"needs this machine's PostgreSQL and Redis: {exc}")
    tmp = tmp_path_factory.mktemp("stack")
    name = f"pgimg{uuid.uuid4().hex[:8]}"
    db, prefix, port = f"paragrade_{name}", f"{name}:", free_port()
    _psql(f"CREATE DATABASE {db}")
    SCRATCH.mkdir(parents=True, exist_ok=True)
    fleet = secrets.token_urlsafe(32)
    with podman.service(tmp) as (url, _client):
        env = {**podman.environment(), "DOCKER_HOST": url,
               "DOCKER_SOCKET": url.removeprefix("unix://"),
               "POSTGRES_PASSWORD": secrets.token_urlsafe(16),
               "PARAGRADE_SECRET_KEY": secrets.token_urlsafe(32),
               # one secret for the runner and the server: the fleet token, not a credential
               # of its own (docker-compose.yml's production path), since this stack starts the
               # runner with the server
               "PARAGRADE_RUNNER_CPU_TOKEN": fleet, "PARAGRADE_FLEET_TOKEN": fleet,
               "PARAGRADE_METRICS_TOKEN": METRICS_TOKEN,
               "PARAGRADE_PORT": str(port), "PARAGRADE_PUBLIC_URL": f"http://127.0.0.1:{port}",
               # the server's network reaches the host's loopback as 10.0.2.2 (slirp4netns)
               "PARAGRADE_DATABASE_URL": f"postgresql+psycopg://root@10.0.2.2:5432/{db}",
               "PARAGRADE_BROKER_URL": "redis://10.0.2.2:6379/0",
               "PARAGRADE_RUNNER_BROKER_URL": "redis://127.0.0.1:6379/0",
               "PARAGRADE_KEY_PREFIX": prefix,
               # no shipped course: the instructor uploads the one package, as in a new course
               "PARAGRADE_ASSIGNMENTS_DIR": "/nonexistent"}
        compose = [compose_bin, "-p", name, "-f", str(REPO_ROOT / "docker-compose.yml"),
                   "-f", str(REPO_ROOT / "containers" / "compose.host-services.yml")]
        http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
        stack = Stack(base=f"http://127.0.0.1:{port}", http=http, compose=compose, env=env)
        try:
            up = subprocess.run([*compose, "up", "-d", "--no-deps", "server", "runner-cpu"],
                                env=env, capture_output=True, text=True, timeout=300, check=False)
            assert up.returncode == 0, up.stderr[-4000:]

            def ready() -> bool:
                with contextlib.suppress(httpx.HTTPError):
                    return http.get("/readyz").status_code == 200
                return False

            stack.wait("the server container to answer", ready, 120)
            made = subprocess.run([*compose, "exec", "-T", "server", "paragrade", "admin",
                                   "create-instructor", PROF[0], "--password", PROF[1]],
                                  env=env, capture_output=True, text=True, timeout=120, check=False)
            assert made.returncode == 0, made.stdout + made.stderr
            yield stack
        finally:
            http.close()
            subprocess.run([*compose, "down", "--timeout", "5"], env=env, capture_output=True,
                           timeout=300, check=False)
            with contextlib.suppress(Exception):
                _psql(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
            r = redis.Redis.from_url("redis://127.0.0.1:6379/0")
            for key in r.scan_iter(f"{prefix}*"):
                r.delete(key)


def _settled(stack: Stack, who: dict[str, str], sid: int) -> dict[str, Any] | None:
    s = stack.get(who, f"/api/submissions/{sid}")
    return s if s["status"] not in ("queued", "running") else None


def test_the_compose_stack_grades_and_ranks_submissions(
        stack: Stack, images: dict[str, dict[str, Any]]) -> None:
    """An instructor uploads t1, a student submits the reference and a wrong answer, the
    containerised runner grades both in sibling sandbox containers, the board ranks them."""
    prof = stack.login(*PROF)
    r = stack.http.post("/api/courses", json={"slug": "hunt", "title": "Treasure hunt"},
                        headers=prof)
    assert r.status_code == 201, r.text
    join = r.json()["join_code"]
    package = {p.relative_to(T1).as_posix(): p.read_bytes() for p in sorted(T1.rglob("*"))
               if p.is_file() and "__pycache__" not in p.parts}
    r = stack.http.post("/api/courses/hunt/assignments/upload", headers=prof,
                        files={"package": ("t1.zip", zip_of(package))})
    assert r.status_code == 201, r.text
    slug = r.json()["slug"]
    url = f"/api/courses/hunt/assignments/{slug}"
    state = stack.wait("the runner to validate the package",
                       lambda: stack.get(prof, url)["validation"] != "validating", 300)
    validated = stack.get(prof, url)
    failed = [c for c in validated.get("checks") or [] if not c["ok"]]
    assert state and validated["validation"] == "ready", (failed, stack.logs())

    r = stack.http.post("/api/auth/register", json={
        "email": "ada@uni.edu", "name": "Ada", "alias": "ada", "password": "a long passphrase 1",
        "join_code": join})
    assert r.status_code == 201, r.text
    ada = stack.login("ada@uni.edu", "a long passphrase 1")
    reference = (T1 / "reference" / "solution.py").read_text()
    wrong = reference.replace("for c in range(chunks)", "for c in range(chunks - 1)")
    assert wrong != reference
    ids = []
    for code in (reference, wrong):
        r = stack.http.post(f"{url}/submissions", headers=ada,
                            files=[("files", ("solution.py", code.encode()))])
        assert r.status_code == 201, r.text
        ids.append(int(r.json()["id"]))
    done = [stack.wait(f"submission {sid} to be graded",
                       functools.partial(_settled, stack, ada, sid), 600) for sid in ids]
    good, bad = done
    assert good["verdict"] == "passed", good
    assert bad["verdict"] == "failed", bad
    assert good["score"] > bad["score"]
    env = good["report"]["environment"]
    assert env["backend"] == "docker" and env["sandboxed"] and env["core_set_enforced"]
    # Measured inside sibling containers, CPU time included (the engine's stats).
    point = good["report"]["scaling"][-1]
    assert point["cpu"] is not None, point

    board = stack.get(ada, f"{url}/leaderboard")
    assert (board[0]["rank"], board[0]["submission_id"]) == (1, ids[0])

    # The server container serves from two processes (PARAGRADE_SERVER_WORKERS in the compose
    # file), and a scrape counts both gradings whichever process recorded them.
    workers = subprocess.run([*stack.compose, "exec", "-T", "server", "python3", "-c", (
        "import os; w = b'spawn' + b'_main'; print(sum(w in open(f'/proc/{p}/cmdline', "
        "'rb').read() for p in os.listdir('/proc') if p.isdigit()))")], env=stack.env,
        capture_output=True, text=True, timeout=60, check=False)
    assert workers.stdout.strip() == "2", (workers.stdout, workers.stderr)
    assert stack.http.get("/metrics").status_code == 403  # production: the scraper's token only
    scrape = stack.http.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}).text
    assert [s.value for f in text_string_to_metric_families(scrape) for s in f.samples
            if s.name == "paragrade_grading_latency_seconds_count"] == [2.0], scrape

    fleet = stack.get(prof, "/api/fleet")
    (runner,) = fleet["runners"]
    assert runner["live"] and runner["capabilities"]["backend"] == "docker"
    # The sandbox image, named with its digest as the engine reports it.
    image = runner["capabilities"]["image"]
    assert re.fullmatch(r"paragrade/runner-cpu:latest@sha256:[0-9a-f]{64}", image), image
    built = images["runner-cpu"]
    assert image.partition("@")[2] in (built["Digest"], f"sha256:{built['Id']}")
    assert env["image_digest"] == runner["capabilities"]["image"]

    # The runner's sandboxes are gone, and so is their scratch.
    time.sleep(1)
    left = podman.environment()
    ps = subprocess.run(["podman", "ps", "-a", "--filter", f"label={podman.SANDBOX_LABEL}",
                         "--format", "{{.Names}}"], env=left, capture_output=True, text=True,
                        timeout=60, check=False)
    assert ps.stdout.strip() == "", ps.stdout
