"""The docker backend for real: sessions in OCI containers through podman's Docker API service.

A module fixture builds the small test image (containers/build-test-image.sh, cached by tag),
starts `podman system service` on a private socket with runc and cgroupfs, and at the end stops
it and removes every container and `libpod_parent` cgroup the module left. Skipped where podman
(or runc) is not installed: `apt-get install podman runc` (scripts/setup.sh does).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runners.protocol import Verdict
from runners.runs.failures import SubmissionFailure
from runners.runs.runconfig import RunConfig
from runners.runs.session import Session
from runners.runs.stage import Stage
from runners.runs.zygote import Zygote
from runners.sandbox import Limits, Mount, SandboxSpec
from runners.sandbox.docker import DockerExecutor
from runners.settings import REPO_ROOT, get_settings
from tests import podman
from tests.conftest import SPIN_ALWAYS, check_freezing
from tests.hostcores import on_whole_cores
from tests.test_credit import BUSY

pytestmark = pytest.mark.docker

BUILD_SCRIPT = REPO_ROOT / "containers" / "build-test-image.sh"
LABEL = podman.SANDBOX_LABEL


@dataclass(frozen=True)
class Engine:
    url: str
    image: str
    client: Any  # docker.DockerClient


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    podman.skip_unless_rootful_podman()
    tmp = tmp_path_factory.mktemp("podman")
    env = {**podman.environment(), "PARAGRADE_RUNTIME_DIR": str(get_settings().runtime_dir)}
    build = subprocess.run(["bash", str(BUILD_SCRIPT)], env=env, capture_output=True, text=True,
                           timeout=600, check=False)
    if build.returncode == 2:  # a prerequisite is missing, not a failure of the image build
        pytest.skip(f"cannot build the test image: {build.stderr.strip()}")
    assert build.returncode == 0, f"{BUILD_SCRIPT.name} failed:\n{build.stderr}"
    image = build.stdout.strip().splitlines()[-1]
    with podman.service(tmp) as (url, client):
        yield Engine(url=url, image=image, client=client)


@pytest.fixture
def docker_session(engine: Engine) -> Iterator[Callable[..., Session]]:
    """Start sessions of a Python source in containers; all are closed, and none may be left."""
    stage = Stage()
    opened: list[Session] = []

    def factory(source: str, *, cpus: tuple[int, ...] = (0,), wall_s: float = 30,
                memory_mb: int = 512, **limits: int) -> Session:
        code = stage.add_code(f"c{len(opened)}", {"solution.py": source.encode()})
        cfg = RunConfig(executor=DockerExecutor(image=engine.image, base_url=engine.url),
                        runtime_dir=get_settings().runtime_dir, stage=stage, code_dir=code,
                        entry_file="solution.py", launcher="python", ranks=1,
                        limits=Limits(cpus=cpus, wall_s=wall_s, memory_mb=memory_mb, **limits))
        session = Session(cfg)
        opened.append(session)
        session.start()
        return session

    try:
        yield factory
    finally:
        for s in opened:
            s.close()
        stage.cleanup()
    left = engine.client.containers.list(all=True, filters={"label": LABEL})
    assert not left, f"containers left behind: {[c.name for c in left]}"


PROBE = """
import os, socket, errno

def add(a, b):
    return a + b

def scale(x, k):
    return x * k

def ids():
    return [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getcwd()]

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return line.split()[1]

def write(path):
    try:
        with open(path, "w") as fh:
            fh.write("x")
        return "ok"
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))

def connect(host, port):
    try:
        socket.create_connection((host, port), timeout=3).close()
        return "connected"
    except OSError as exc:
        return type(exc).__name__

def interfaces():
    return sorted(name for _i, name in socket.if_nameindex())

def cpus():
    return sorted(os.sched_getaffinity(0))

def eat_memory():
    hog = []
    while True:
        hog.append(b"x" * (32 << 20))  # written, so every page is resident

def spin():
    while True:
        pass

def flood():
    import sys
    line = "y" * 65535 + "\\n"
    while True:
        sys.stdout.write(line)
        sys.stdout.flush()
"""


def test_a_session_calls_a_function_in_a_container(docker_session: Callable[..., Session]) -> None:
    s = docker_session(PROBE)
    value, secs = s.call("add", 2, b=3)
    assert value == 5 and 0 < secs < 1
    arr, _ = s.call("scale", np.arange(4, dtype=np.float64), 2)
    assert isinstance(arr, np.ndarray) and arr.tolist() == [0, 2, 4, 6]
    big, _ = s.call("scale", np.arange(1 << 18, dtype=np.float64), 3)  # 2 MiB: files both ways
    assert np.array_equal(big, np.arange(1 << 18) * 3.0)
    info = s.close()
    assert info.returncode == 0, info.output_excerpt


def test_b_no_network_inside(docker_session: Callable[..., Session]) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        s = docker_session(PROBE)
        assert s.call("connect", "127.0.0.1", port)[0] != "connected"  # a host listener we own
        redis_on_host = False
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", 6379), timeout=1).close()
            redis_on_host = True
        got = s.call("connect", "127.0.0.1", 6379)[0]
        assert got != "connected", f"reached the host's port 6379 (Redis there: {redis_on_host})"
        assert s.call("interfaces")[0] == ["lo"]
    finally:
        listener.close()


def test_c_runs_as_nobody_on_a_read_only_root(docker_session: Callable[..., Session]) -> None:
    s = docker_session(PROBE)
    assert s.call("ids")[0] == [65534, 65534, 65534, 65534, "/tmp/work"]
    assert int(s.call("status", "CapEff")[0], 16) == 0
    assert s.call("status", "NoNewPrivs")[0] == "1"
    runtime = get_settings().runtime_dir
    for path in ("/probe", "/usr/probe", f"{runtime}/probe", "/sub/probe", "/opt/paragrade/harness/x"):
        assert s.call("write", path)[0] in ("EROFS", "EACCES"), path
    assert s.call("write", "/probe")[0] == "EROFS"
    assert s.call("write", "/tmp/work/probe")[0] == "ok"
    assert s.call("write", "/tmp/probe")[0] == "ok"


def test_d_memory_bomb_is_memory_exceeded(docker_session: Callable[..., Session]) -> None:
    s = docker_session(PROBE, memory_mb=192)
    with pytest.raises(SubmissionFailure) as err:
        s.call("eat_memory")
    assert err.value.verdict is Verdict.MEMORY_EXCEEDED
    assert s.exit_info is not None and s.exit_info.oom_killed  # the engine's OOMKilled, read back


def test_e_wall_clock_limit_is_timeout(docker_session: Callable[..., Session]) -> None:
    s = docker_session(PROBE, wall_s=3)
    t0 = time.monotonic()
    with pytest.raises(SubmissionFailure) as err:
        s.call("spin")
    assert err.value.verdict is Verdict.TIMEOUT
    assert time.monotonic() - t0 < 15


def test_f_output_flood_is_cut(docker_session: Callable[..., Session]) -> None:
    limit = 1 << 20
    s = docker_session(PROBE, output_bytes=limit)
    with pytest.raises(SubmissionFailure) as err:
        s.call("flood")
    assert err.value.verdict is Verdict.OUTPUT_EXCEEDED
    assert s.exit_info is not None and s.exit_info.output_bytes > limit
    assert len(s.output) < 128 * 1024  # head and tail excerpts only


def test_g_cpuset_is_the_allotment(docker_session: Callable[..., Session]) -> None:
    mine = sorted(os.sched_getaffinity(0))
    one = (mine[-1],)
    assert docker_session(PROBE, cpus=one).call("cpus")[0] == list(one)
    if len(mine) > 1:
        both = tuple(mine[:2])
        assert docker_session(PROBE, cpus=both).call("cpus")[0] == list(both)


def test_g2_a_paused_container_burns_nothing(docker_session: Callable[..., Session]) -> None:
    # Timing keeps the idle side of a pair paused (the engine's cgroup freezer).
    s = docker_session(SPIN_ALWAYS, cpus=(0, 1), wall_s=4)
    assert s.freeze(True) and s.freeze(False)
    check_freezing(s, wall_s=4)


def test_g3_cpu_time_is_the_containers_whole_cgroup(docker_session: Callable[..., Session]) -> None:
    # Speedup credit: the CPU time of every process in the container, read from outside it.
    s = docker_session(BUSY, cpus=tuple(sorted(os.sched_getaffinity(0))[:2]))
    s.call("two", 0.4)
    assert s.last_cpu_s is not None and 0.75 < s.last_cpu_s < 1.3, s.last_cpu_s
    s.call("idle", 0.3)
    assert s.last_cpu_s is not None and s.last_cpu_s < 0.1, s.last_cpu_s


def test_g4_the_containers_processes_as_the_host_numbers_them(
        docker_session: Callable[..., Session]) -> None:
    # The GPU witness matches the driver's process ids (the host's) against the sandbox's.
    s = docker_session(BUSY)
    s.call("idle", 0.0)
    pids = s.pids()
    assert pids, pids
    commands = [Path(f"/proc/{p}/cmdline").read_bytes() for p in pids if Path(f"/proc/{p}").exists()]
    assert any(b"worker.py" in c for c in commands), commands


def test_h_a_container_that_cannot_start_is_not_left(engine: Engine, tmp_path: Path) -> None:
    import docker

    work = tmp_path / "work"
    work.mkdir()
    spec = SandboxSpec(argv=["/nonexistent/program"], mounts=[], workdir=Mount(work, "/tmp/work", True),
                       env={}, limits=Limits(cpus=(0,)))
    with pytest.raises(docker.errors.APIError):
        DockerExecutor(image=engine.image, base_url=engine.url).start(spec)
    with pytest.raises(docker.errors.ImageNotFound):  # not an attempt to pull it
        DockerExecutor(image="localhost/paragrade/no-such-image:0", base_url=engine.url).start(spec)
    assert not engine.client.containers.list(all=True, filters={"label": LABEL})


def test_a_docker_runner_refuses_to_start_without_its_engine_or_image(engine: Engine,
                                                                      tmp_path: Path) -> None:
    """Not one job after another failing as a platform error: the runner says why at start."""
    from runners.sandbox import BackendUnavailable, create_executor

    ok = get_settings().model_copy(update={"backend": "docker", "docker_url": engine.url,
                                           "docker_image": engine.image})
    assert create_executor(ok).name == "docker"
    missing = ok.model_copy(update={"docker_image": "localhost/paragrade/no-such-image:0"})
    with pytest.raises(BackendUnavailable, match="has no image 'localhost/paragrade/no-such"):
        create_executor(missing)
    nobody = ok.model_copy(update={"docker_url": f"unix://{tmp_path}/nobody.sock"})
    with pytest.raises(BackendUnavailable, match="no Docker API answers at unix://"):
        create_executor(nobody)


def test_a_live_sandbox_costs_the_engine_nothing_and_gets_its_cores(
        docker_session: Callable[..., Session], engine: Engine) -> None:
    """podman 4.3's compat `wait` spins a core while it blocks: waiting on it took a core from
    every timed run (t1's reference measured 0.8x in containers, 1.7x under bwrap)."""
    s = docker_session(TWO_WORKERS, cpus=(0, 1))
    before = podman.service_cpu_seconds(engine.url)
    time.sleep(2)
    assert podman.service_cpu_seconds(engine.url) - before < 0.5  # was 2.3 s
    # Two busy processes on two cores: CPU time well above the wall time (generous bound; in CI
    # once 1.0 at twice the wall time, a core short: tests/hostcores.py).
    s.call("two", 3_000_000)

    def busy_cores() -> list[tuple[float, float]]:
        readings = []
        for _ in range(3):
            t0 = time.perf_counter()
            s.call("two", 3_000_000)
            wall = time.perf_counter() - t0
            assert s.last_cpu_s is not None
            readings.append((s.last_cpu_s / wall, wall))
        return readings

    readings = on_whole_cores(busy_cores, lambda r: max(r)[0] > 1.3)
    assert max(readings)[0] > 1.3, readings


TWO_WORKERS = """
import multiprocessing as mp

def spin(n):
    s = 0
    for i in range(n):
        s += i
    return s

def two(n):
    with mp.Pool(2) as pool:
        return pool.map(spin, [n, n])
"""


def test_a_new_runner_removes_the_stopped_sandboxes_a_killed_one_left(engine: Engine) -> None:
    executor = DockerExecutor(image=engine.image, base_url=engine.url)
    labels = dict([LABEL.split("=")])
    stopped = engine.client.containers.create(image=engine.image, entrypoint=["sh", "-c", "exit 0"],
                                              labels=labels)
    stopped.start()
    stopped.wait(timeout=30)
    running = engine.client.containers.create(
        image=engine.image, entrypoint=["python", "-c", "import time; time.sleep(60)"],
        labels=labels)
    running.start()
    other = engine.client.containers.create(image=engine.image, entrypoint=["sh", "-c", "exit 0"])
    try:
        assert executor.sweep() == 0  # stopped a moment ago: maybe another runner's, collecting
        assert executor.sweep(min_age_s=0) == 1
        left = {c.id for c in engine.client.containers.list(all=True)}
        assert stopped.id not in left
        assert running.id in left and other.id in left  # running, or not a sandbox: kept
    finally:
        for c in (running, other):
            c.remove(force=True)


def test_z_tests_forked_in_a_container_leave_the_next_nothing(engine: Engine) -> None:
    """The zygote (tests/test_zygote.py) in a container: the container's init forks each test."""
    stage = Stage()
    leave = (Path(__file__).parent / "hostile" / "leave_state.py").read_bytes()
    cfg = RunConfig(executor=DockerExecutor(image=engine.image, base_url=engine.url),
                    runtime_dir=get_settings().runtime_dir, stage=stage,
                    code_dir=stage.add_code("z", {"solution.py": leave}), entry_file="solution.py",
                    launcher="python", ranks=1, limits=Limits(cpus=(0,), wall_s=30, memory_mb=512))
    z = Zygote(cfg, ["numpy"])
    try:
        z.start()
        assert z.usable
        first = z.session()
        first.start()
        left = set(first.call("leave")[0])
        assert {"tmp", "work", "shm", "process", "sysv-shm", "memory", "result-file"} <= left, left
        assert first.call("reach_parent")[0] == []
        time.sleep(0.1)
        first.close()
        assert z.usable
        second = z.session()
        second.start()
        assert second.call("found_now")[0] == []
        second.close()
        assert z.usable
    finally:
        z.discard()
        stage.cleanup()
