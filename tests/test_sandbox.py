"""Sandbox sessions: calls, errors, crashes, limits; and how each backend builds its command."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from runners import package
from runners.protocol import Verdict
from runners.runs import configure
from runners.runs.codec import decode
from runners.runs.failures import SubmissionFailure, SubmissionRaised
from runners.runs.session import Session
from runners.runs.stage import Stage
from runners.sandbox import Limits, Mount, SandboxSpec, create_executor
from runners.sandbox.apptainer import ApptainerExecutor
from runners.sandbox.base import HostRunning
from runners.sandbox.bwrap import BwrapExecutor
from runners.sandbox.docker import DockerExecutor
from runners.settings import get_settings
from tests.conftest import COURSE, SPIN_ALWAYS, SessionFactory, check_freezing

BASIC = """
import os
def add(a, b):
    return a + b
def cpus():
    return sorted(os.sched_getaffinity(0))
def boom():
    raise ValueError("nope")
def arr(n):
    import numpy as np
    return np.arange(n, dtype=np.float64) * 2
def whoami():
    return os.getuid(), os.getcwd()
"""


def test_calls_return_values_and_times(make_session: SessionFactory, backend: str) -> None:
    s = make_session(BASIC, backend=backend)
    value, secs = s.call("add", 2, b=3)
    assert value == 5
    assert 0 < secs < 1
    got, _ = s.call("arr", 5)
    assert isinstance(got, np.ndarray) and got.tolist() == [0, 2, 4, 6, 8]


def test_numpy_arguments_cross_the_boundary(make_session: SessionFactory) -> None:
    s = make_session(BASIC)
    value, _ = s.call("add", np.arange(3), np.ones(3, dtype=np.int64))
    assert value.tolist() == [1, 2, 3]


def test_exceptions_come_back_with_their_type(make_session: SessionFactory, backend: str) -> None:
    s = make_session(BASIC, backend=backend)
    with pytest.raises(SubmissionRaised) as err:
        s.call("boom")
    assert err.value.type_name == "ValueError" and err.value.message == "nope"
    assert s.call("add", 1, 1)[0] == 2  # the session survives


def test_missing_function_is_an_error_not_a_crash(make_session: SessionFactory) -> None:
    s = make_session(BASIC)
    with pytest.raises(SubmissionRaised, match="AttributeError"):
        s.call("nope")


def test_import_error_is_reported(make_session: SessionFactory) -> None:
    with pytest.raises(SubmissionRaised, match="ZeroDivisionError"):
        make_session("x = 1 / 0\n")


def test_syntax_error_is_reported(make_session: SessionFactory) -> None:
    with pytest.raises(SubmissionRaised, match="SyntaxError"):
        make_session("def f(:\n")


@pytest.mark.skipif(os.getuid() != 0, reason="drops to nobody only when run as root")
def test_runs_as_nobody_in_a_private_work_dir(make_session: SessionFactory) -> None:
    uid, cwd = make_session(BASIC).call("whoami")[0]
    assert uid == 65534 and cwd == "/tmp/work"


def test_cpu_affinity_is_the_allotment(make_session: SessionFactory, backend: str) -> None:
    assert make_session(BASIC, backend=backend, cpus=(1,)).call("cpus")[0] == [1]


def test_crash_is_named(make_session: SessionFactory, backend: str) -> None:
    s = make_session("import os\ndef die():\n    os._exit(3)\n", backend=backend)
    with pytest.raises(SubmissionFailure) as err:
        s.call("die")
    assert err.value.verdict is Verdict.CRASHED and "status 3" in err.value.message


def test_a_sandbox_that_ended_between_calls_crashed_and_tampered_with_nothing(
        make_session: SessionFactory) -> None:
    """Its end of the channel closed (a thread of its own called os._exit after a call): the
    next call says how it ended, not that the result channel was tampered with."""
    s = make_session("import os, threading, time\n"
                     "def later():\n    threading.Timer(0.2, os._exit, (4,)).start()\n"
                     "    return 1\n")
    assert s.call("later")[0] == 1
    time.sleep(1.5)
    with pytest.raises(SubmissionFailure) as err:
        s.call("later")
    assert err.value.verdict is Verdict.CRASHED and "status 4" in err.value.message, err.value


def test_wall_clock_limit(make_session: SessionFactory) -> None:
    s = make_session("def spin():\n    while True:\n        pass\n", wall_s=2)
    with pytest.raises(SubmissionFailure) as err:
        s.call("spin")
    assert err.value.verdict is Verdict.TIMEOUT


def test_a_frozen_sandbox_burns_nothing_and_its_wall_clock_stops(
        make_session: SessionFactory) -> None:
    # What keeps an idle side of a timed pair from slowing the other.
    s = make_session(SPIN_ALWAYS, cpus=(0, 1), wall_s=3)
    if not s.freeze(True):
        assert os.getuid() != 0, "running as root, yet no cgroup freezer could be used"
        pytest.skip("no cgroup freezer without root")
    s.freeze(False)
    check_freezing(s, wall_s=3)


def test_a_killed_runners_empty_cgroups_are_swept_and_live_ones_kept(
        make_session: SessionFactory) -> None:
    from runners.sandbox import cgroups

    if os.getuid() != 0:
        pytest.skip("cgroups need root")
    left = cgroups.create(memory_bytes=1 << 26, pids_max=8, cpus=[0])  # as a killed runner would
    live = make_session("def f():\n    return 1\n")
    running = live._run.proc
    assert isinstance(running, HostRunning)
    busy = running._cg.dirs
    assert left.dirs and busy
    for d in left.dirs + busy:  # both old enough to be swept
        os.utime(d, (time.time() - 3600, time.time() - 3600))
    assert cgroups.sweep(older_than_s=600) >= len(left.dirs)
    assert not any(d.exists() for d in left.dirs)
    assert all(d.exists() for d in busy)  # a run in progress keeps its cgroups
    assert live.call("f")[0] == 1
    fresh = cgroups.create(memory_bytes=1 << 26, pids_max=8, cpus=[0])
    cgroups.sweep(older_than_s=600)
    assert all(d.exists() for d in fresh.dirs)  # too young to be anyone's leftover
    fresh.remove()


def test_a_sandbox_a_killed_runner_left_frozen_is_thawed_killed_and_swept(
        make_session: SessionFactory) -> None:
    """A frozen process cannot die, not even by SIGKILL: a runner killed while timing (its
    idle side frozen) would leave that sandbox for good."""
    from runners.sandbox import cgroups

    if os.getuid() != 0:
        pytest.skip("cgroups need root")
    left = make_session("def f():\n    return 1\n")
    running = left._run.proc
    assert isinstance(running, HostRunning)
    if not left.freeze(True):
        pytest.skip("no cgroup freezer here")
    pids = running._cg.pids()
    assert pids
    for d in running._cg.dirs:
        os.utime(d, (time.time() - 3600, time.time() - 3600))
    assert cgroups.sweep(older_than_s=600) >= len(running._cg.dirs)
    assert not any(d.exists() for d in running._cg.dirs)
    for pid in pids:  # gone, or a zombie its parent (this test, not a dead runner) has to reap
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_strict_decoding_refuses_object_arrays() -> None:
    with pytest.raises(ValueError, match="not allowed"):
        decode({"__ndarray__": "", "dtype": "|O", "shape": [0]})
    with pytest.raises(ValueError):
        decode({"__float__": "1.5"})


@pytest.mark.mpi
def test_mpi_ranks_share_a_call(make_session: SessionFactory) -> None:
    src = ("from mpi4py import MPI\n"
           "def total(x):\n    c = MPI.COMM_WORLD\n    return c.reduce(x * (c.rank + 1), root=0)\n")
    s = make_session(src, launcher="mpirun", ranks=2, cpus=(0, 1), memory_mb=1024)
    assert s.call("total", 10)[0] == 30
    big = np.arange(1 << 18, dtype=np.float64)  # a file every rank maps; the sum comes back in one
    assert np.array_equal(s.call("total", big)[0], big * 3)


def spec(tmp_path: Path, gpus: int = 0) -> SandboxSpec:
    return SandboxSpec(argv=["python", "-c", "pass"],
                       mounts=[Mount(tmp_path / "sub", "/sub")],
                       workdir=Mount(tmp_path / "work", "/tmp/work", writable=True),
                       env={"PATH": "/usr/bin"},
                       limits=Limits(cpus=(0, 1), memory_mb=512, pids=64, gpus=gpus))


def test_bwrap_command_is_confined(tmp_path: Path) -> None:
    cmd = BwrapExecutor(runtime_dir=Path("/opt/rt")).command(spec(tmp_path))
    joined = " ".join(cmd)
    for flag in ("--unshare-all", "--die-with-parent", "--clearenv", "--new-session"):
        assert flag in cmd
    assert "--share-net" not in cmd
    assert f"--ro-bind {tmp_path}/sub /sub" in joined
    assert f"--bind {tmp_path}/work /tmp/work" in joined
    assert "--bind / " not in joined and "/etc/shadow" not in joined


def test_docker_kwargs_are_locked_down(tmp_path: Path) -> None:
    kw = DockerExecutor(image="img").run_kwargs(spec(tmp_path, gpus=1))
    assert kw["network_mode"] == "none" and kw["cap_drop"] == ["ALL"] and kw["read_only"]
    assert kw["mem_limit"] == "512m" and kw["pids_limit"] == 64 and kw["cpuset_cpus"] == "0,1"
    assert kw["volumes"][str(tmp_path / "sub")] == {"bind": "/sub", "mode": "ro"}
    assert kw["user"] == "65534:65534"
    assert {u.name for u in kw["ulimits"]} >= {"nofile", "nproc", "fsize"}
    assert kw["device_requests"][0].count == 1
    # The image's own ENTRYPOINT (paragrade, in the runner image) is replaced, not prepended.
    assert [*kw["entrypoint"], *kw["command"]] == ["python", "-c", "pass"]
    assert kw["entrypoint"] == ["python"]
    # The engine holds the cpuset, whatever a runner in a container sees of the host's cgroups.
    assert DockerExecutor(image="img").cpuset_enforced()


def test_apptainer_command(tmp_path: Path) -> None:
    # The command line only: sessions run it for real, as the sandbox user, in
    # tests/test_apptainer_backend.py and the red team's [apptainer] cases (marker apptainer).
    cmd = ApptainerExecutor(image="runner.sif").command(spec(tmp_path, gpus=1))
    assert cmd[:3] == ["apptainer", "--quiet", "exec"] and {"--containall", "--userns"} <= set(cmd)
    assert cmd[cmd.index("--network") + 1] == "none" and "--net" in cmd and "--nv" in cmd
    assert f"{tmp_path}/sub:/sub:ro" in cmd and f"{tmp_path}/work:/tmp/work:rw" in cmd
    # The program runs with the session's environment only (not apptainer's or the image's).
    after = cmd[cmd.index("runner.sif") + 1:]
    assert after[:2] == ["/usr/bin/env", "-i"] and after[-3:] == ["python", "-c", "pass"]


def test_big_arguments_arrive_and_are_not_timed(make_session: SessionFactory) -> None:
    """Staging happens before the clock starts: 256 MiB in, a call that only reads it, ≈ 0 s;
    the array is the grader's file mapped, not a copy charged to the sandbox's 256 MiB."""
    s = make_session("def total(a):\n    return float(a[::4096].sum())\n", memory_mb=256)
    big = np.ones(1 << 25)
    value, secs = s.call("total", big)
    assert value == (1 << 25) // 4096
    assert secs < 0.05, f"the timed call took {secs:.3f} s: argument transfer was timed"


LARGE = """
import os
import numpy as np
def double(a, b=None):
    a *= 2  # the submission's own copy: the grader's file is mapped copy-on-write
    return a, type(a.base).__name__, sorted(os.listdir(os.environ["INBOX"]))
def ones(n, dtype):
    return {"big": np.ones(n, dtype=dtype).reshape(2, -1), "small": np.arange(3)}
"""


def test_large_arrays_travel_as_files_both_ways(make_session: SessionFactory, backend: str,
                                                stage: Stage) -> None:
    """An argument of 1 MiB or more arrives as the grader's file mapped copy-on-write (writable,
    the file untouched, its name gone before the call), a large result comes back through the
    result file, exact in dtype and shape."""
    s = make_session(LARGE, backend=backend, memory_mb=1024, start=False)
    s.cfg.extra_env["INBOX"] = s.cfg.executor.path(Mount(s._ctl, "/run/paragrade"))
    s.start()
    big = np.arange(1 << 18, dtype=np.float64)  # 2 MiB
    for _ in range(2):  # the first call's writes reach neither the grader nor the next call
        (got, base, inbox), _ = s.call("double", big, b=np.ones(1 << 17))
        assert base == "mmap" and inbox == []
        assert np.array_equal(got, np.arange(1 << 18) * 2) and got.dtype == np.float64
        assert np.array_equal(big, np.arange(1 << 18))
    value, _ = s.call("ones", 1 << 20, "int32")  # 4 MiB
    assert value["big"].dtype == np.int32 and value["big"].shape == (2, 1 << 19)
    assert int(value["big"].sum()) == 1 << 20 and value["small"].tolist() == [0, 1, 2]
    assert not any(p.name.startswith("args-") for p in stage.root.rglob("*"))


FORGE = """
import __main__
import json
import numpy as np
def forge(text):
    value = json.loads(text)
    real = __main__.encode_result
    def fake(v, files):
        real(np.zeros(1 << 18), files)  # a genuine 2 MiB result file
        return value
    __main__.encode_result = fake  # the harness is the submission's to rewrite
    return None
"""

REF = {"dtype": "<f8", "shape": [1 << 18]}


@pytest.mark.parametrize(("forged", "verdict"), [
    ({"__ndfile__": [8, 1 << 21], **REF}, Verdict.FORBIDDEN),  # past the file's end
    ({"__ndfile__": [0, 1 << 20], **REF}, Verdict.FORBIDDEN),  # size not the shape's
    ({"__ndfile__": ["0", 1 << 21], **REF}, Verdict.FORBIDDEN),
    ({"__ndfile__": [0, 1 << 21], "dtype": "|O", "shape": [1 << 18]}, Verdict.FORBIDDEN),
    # overlapping references: each inside the file, together far more than the run may return
    ([{"__ndfile__": [0, 1 << 21], **REF}] * 200, Verdict.OUTPUT_EXCEEDED),
])
def test_forged_result_references_are_refused(make_session: SessionFactory, forged: object,
                                              verdict: Verdict) -> None:
    s = make_session(FORGE, memory_mb=256)
    with pytest.raises(SubmissionFailure) as err:
        s.call("forge", json.dumps(forged))
    assert err.value.verdict == verdict, err.value.message


def test_the_result_file_is_read_through_the_graders_handle_only(
        make_session: SessionFactory, tmp_path: Path) -> None:
    """Whatever becomes of the result file's name (here it is swapped for a link to another
    file once the sandbox runs), the harness writes, and the grader reads, the file the grader
    made: the other file is neither read nor written."""
    secret = tmp_path / "secret"
    secret.write_bytes(b"s" * (1 << 22))
    s = make_session("import numpy as np\ndef big():\n    return np.full(1 << 18, 7.0)\n",
                     memory_mb=512)
    result = s._run.dir / "result"
    result.unlink()
    result.symlink_to(secret)
    value, _ = s.call("big")
    assert np.array_equal(value, np.full(1 << 18, 7.0))
    assert secret.read_bytes() == b"s" * (1 << 22)


def test_the_result_file_cannot_be_swapped_in_the_sandbox(make_session: SessionFactory) -> None:
    s = make_session("import os\ndef swap():\n    try:\n        os.unlink('/run/paragrade-result')\n"
                     "    except OSError as e:\n        return e.errno\n")
    value, _ = s.call("swap")
    assert value in (errno.EBUSY, errno.EROFS, errno.EACCES, errno.EPERM)


def test_gpu_sandbox_sees_the_cuda_toolkit_and_no_other_variable(
        stage: Stage, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real-GPU run gets the named CUDA variables and toolkit folders (numba-cuda needs libnvvm:
    measured on an H100, docs/gpu-validation.md), and nothing else of the runner's environment."""
    toolkit = Path(tempfile.mkdtemp(prefix="cuda-13.0-"))  # one the sandbox user can reach
    (toolkit / "nvvm" / "lib64").mkdir(parents=True)
    (toolkit / "nvvm" / "lib64" / "libnvvm.so").write_bytes(b"")
    toolkit.chmod(0o755)
    monkeypatch.setenv("CUDA_HOME", str(toolkit))
    monkeypatch.setenv("PARAGRADE_GPU_PATHS", f'["{toolkit}"]')
    monkeypatch.setenv("PARAGRADE_RUNNER_TOKEN", "must-not-leak")
    get_settings.cache_clear()
    try:
        t1 = package.load(COURSE / "t1-multiprocessing")
        code = stage.add_code("gpu-env", {"solution.py": b"""
import os
def probe(home):
    return (os.environ.get("CUDA_HOME"), sorted(os.listdir(home + "/nvvm/lib64")),
            sorted(k for k in os.environ if "TOKEN" in k))
"""})
        settings = get_settings()
        cfg = configure.make_config(t1, executor=create_executor(settings, "bwrap"), stage=stage,
                                    code_dir=code, cpus=[0], workers=1, gpu_mode="real")
        session = Session(cfg)
        try:
            session.start()
            value, _ = session.call("probe", str(toolkit))
            assert list(value) == [str(toolkit), ["libnvvm.so"], []]
        finally:
            session.close()
        cfg = configure.make_config(t1, executor=create_executor(settings, "bwrap"), stage=stage,
                                    code_dir=code, cpus=[0], workers=1, gpu_mode="none")
        assert "CUDA_HOME" not in cfg.extra_env and cfg.extra_mounts == ()
    finally:
        get_settings.cache_clear()
        shutil.rmtree(toolkit)


def test_processes_the_code_starts_can_import_it_by_name(make_session: SessionFactory) -> None:
    # Ray's workers (joblib-sweep's Ray backend) and spawn pools import the module afresh.
    source = ("import subprocess, sys\nMARK = 41\n"
              "def child():\n"
              "    return subprocess.run([sys.executable, '-c', 'import solution; "
              "print(solution.MARK + 1)'], capture_output=True, text=True).stdout.strip()\n")
    assert make_session(source).call("child")[0] == "42"


def test_no_silent_fallback_to_the_unsafe_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without bwrap, 'auto' refuses rather than grading as the runner's own user (who could read
    # its secrets and other uploads); 'process' must be named.
    from runners.sandbox import BackendUnavailable, create_executor
    from runners.sandbox.bwrap import BwrapExecutor
    from runners.settings import get_settings

    monkeypatch.setattr(BwrapExecutor, "available", staticmethod(lambda: False))
    with pytest.raises(BackendUnavailable, match="PARAGRADE_BACKEND=process"):
        create_executor(get_settings(), "auto")
    assert create_executor(get_settings(), "process").name == "process"
