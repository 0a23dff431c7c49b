"""The apptainer backend for real: the shipped CPU and MPI packages graded in the runner's image.

The image is the CPU/MPI runner's (containers/runner-cpu.Dockerfile, converted to an apptainer
sandbox folder), built once and cached outside the checkout; on hosts without an apptainer
package, apptainer runs from containers/apptainer-host. The red-team containment and credit
cases run under apptainer too (tests/test_redteam.py, tests/test_redteam_credit.py, parametrised
by backend); here: whole gradings, and what the host side must see and clean up.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from runners import package
from runners.grading import grader
from runners.nodes import hardware
from runners.protocol import GradeReport, Verdict
from tests import apptainer
from tests.apptainer import apptainer_backend  # noqa: F401  (a fixture)
from tests.conftest import COURSE, FIXTURES, SessionFactory
from tests.test_grading import WRONG_T1
from tests.test_redteam import grade, live_in_namespace

pytestmark = [pytest.mark.apptainer, pytest.mark.slow, pytest.mark.usefixtures("apptainer_backend")]

MOUNT_SOURCE = "paragrade-apptainer"  # the tmpfs each run's private layer is made of


def host_mounts() -> list[str]:
    return [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if MOUNT_SOURCE in line or "/var/cache/paragrade/apptainer" in line]


def graded_reference(slug: str) -> GradeReport:
    a = package.load(COURSE / slug)
    r = grader.grade(a, package.code_of(a, "reference"))
    assert r.environment.backend == "apptainer" and r.environment.sandboxed
    assert r.environment.image_digest and "sandbox" in r.environment.image_digest
    assert r.verdict is Verdict.PASSED, r.summary
    assert r.speedup is not None, r.summary
    # The credit rule reads CPU time from outside (the run's cgroup): measured, never
    # "parallelism not measured".
    cpu = r.scaling[-1].cpu
    assert cpu is not None, [s.model_dump() for s in r.scaling]
    assert r.credit is not None and "not measured" not in r.credit.reason, r.credit
    assert cpu.work_ratio > 0.5, cpu
    # More than one busy core, unless the grading's own capacity probes found the node short of
    # cores (another tenant's load) in some window. Neither the baseline's busy cores nor the
    # ratio to them tells: the loss is one-sided (the serial baseline keeps its one core while
    # the pool gets one of two), and under load both read alike (measured: 0.99 and 1.00, 0.5
    # and 0.5). On a quiet node no window is short, and a pool that did not run in parallel
    # fails here. Cores allotted and children's CPU time read, whatever the load: the session
    # test below.
    node = r.speedup.interference
    assert cpu.parallelism > 1.0 or (node is not None and node.short > 0), (cpu, node, r.notes)
    assert r.credit.status in ("credited", "capped"), r.credit
    return r


def test_t1_reference_passes_with_its_cpu_time_measured() -> None:
    graded_reference("t1-multiprocessing")


@pytest.mark.mpi
def test_t2_mpi_reference_passes_with_its_cpu_time_measured() -> None:
    graded_reference("t2-mpi")


def test_a_wrong_solution_fails(t1: package.Assignment) -> None:
    r = grader.grade(t1, {"solution.py": WRONG_T1.encode()}, seed=12345)
    assert r.environment.backend == "apptainer"
    assert r.verdict is Verdict.FAILED and r.performance_points == 0 and r.speedup is None


# Speedup cheats whose defence is the sandbox's (the red team's, on its one-core package): the
# credit rule's CPU readings under apptainer are tests/test_redteam_credit.py's.
@pytest.fixture(scope="module")
def sum1() -> package.Assignment:
    return package.load(FIXTURES / "redteam" / "sum1")


def test_more_processes_than_cores_cannot_beat_the_core_bound(sum1: package.Assignment) -> None:
    # Eight pool workers, and a try to widen the affinity: the cpuset set from outside holds.
    r = grade(sum1, "oversubscribe.py")
    assert r.environment.backend == "apptainer"
    assert r.verdict is Verdict.PASSED and r.speedup is not None
    assert r.speedup.median <= sum1.manifest.resources.cores * 1.1, r.speedup
    assert r.environment.core_set == [hardware.host_cpus()[0]]


def test_an_idle_submission_cannot_slow_the_baseline(sum1: package.Assignment) -> None:
    # A thread that spins whenever the submission is not timed: the cgroup freezer stops the
    # whole container (apptainer's own processes included) while the baseline is timed.
    r = grade(sum1, "idle_burner.py")
    assert r.environment.backend == "apptainer"
    assert any("frozen" in note for note in r.notes), r.notes  # timed in frozen pairs
    assert r.verdict is Verdict.PASSED and r.speedup is not None
    assert r.speedup.median < 1.3, r.speedup


SOURCE = """
import os, time

def ids():
    return [os.getuid(), os.geteuid(), os.getgid(), os.getcwd(), os.environ["PATH"]]

def namespace():
    return os.readlink("/proc/self/ns/pid")

def spin(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass

def cores():
    return sorted(os.sched_getaffinity(0))

def spin_in_children(seconds, n):
    import multiprocessing as mp
    children = [mp.get_context("fork").Process(target=spin, args=(seconds,)) for _ in range(n)]
    for c in children:
        c.start()
    for c in children:
        c.join()
"""


def descendants(pid: int) -> list[int]:
    found: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        found += map(int, kids)
        todo += map(int, kids)
    return found


def test_a_session_runs_as_nobody_its_cpu_time_read_outside(make_session: SessionFactory) -> None:
    before = host_mounts()
    allotted = (hardware.host_cpus()[-1],)  # not the default core 0: the set must be the one given
    s = make_session(SOURCE, backend="apptainer", cpus=allotted)
    ns = s.call("namespace")[0]
    uid, euid, gid, cwd, path = s.call("ids")[0]
    assert (uid, euid, gid, cwd) == (65534, 65534, 65534, "/tmp/work")
    assert path.startswith(str(s.cfg.runtime_dir))  # the session's PATH, not the image's
    # What a parallel submission needs of the backend, whatever else the node runs: exactly the
    # allotted cores, and the CPU time of the processes it starts inside the container read from
    # outside (busy cores and work ratio come from that reading).
    assert s.call("cores")[0] == list(allotted)
    s.call("spin_in_children", 0.3, 2)
    info = s.close()
    assert info.returncode == 0, info.output_excerpt
    assert info.cpu_s is not None and info.cpu_s >= 0.6  # from the run's cgroup, outside it
    assert live_in_namespace(ns) == []
    # Every mount of the run lived in its own namespace: the host's table is as it was.
    assert host_mounts() == before


def test_a_killed_wrapper_takes_its_run_with_it(make_session: SessionFactory) -> None:
    s = make_session(SOURCE, backend="apptainer")
    ns = s.call("namespace")[0]
    running = s._run.running
    assert running is not None
    root = running._proc.pid  # type: ignore[attr-defined]
    outer = [p for p in [root, *descendants(root)]
             if Path(f"/proc/{p}/cmdline").read_bytes().startswith(b"unshare\0")]
    assert len(outer) == 1
    os.kill(outer[0], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while live_in_namespace(ns) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live_in_namespace(ns) == []
    s.close()


def test_the_image_is_root_owned_and_holds_no_runner_source() -> None:
    img = Path(os.environ["PARAGRADE_APPTAINER_IMAGE"])
    assert not (img / "src").exists() and not (img / "opt/paragrade/app").exists()
    assert (img / "opt/paragrade/runtime/bin/python").exists()
    st = img.stat()
    assert st.st_uid == 0 and not st.st_mode & 0o022


@pytest.mark.gpu_image
@pytest.mark.timeout(7400)
def test_the_gpu_image_builds_and_runs_its_cpu_path() -> None:
    # The GPU runner's OCI image and the apptainer image from its definition, as a site builds
    # them (containers/README.md; a sandbox folder here: the SIF only adds mksquashfs, 8 min), and
    # what of them runs without a GPU: every library imports, a numba kernel under the CUDA
    # simulator, two Open MPI ranks. From nothing, tens of minutes (Open MPI compiles): the
    # session builds it in the background from its start (tests/apptainer.py); this test is last.
    said = apptainer.gpu_image()
    if isinstance(said, str):
        pytest.skip(said)
    assert [f"{name}==" in said["imports"] for name in ("numpy", "mpi4py", "cupy", "numba", "torch")] \
        == [True] * 5, said
    assert said["numba_cudasim_kernel"] == "ok", said
    assert said["mpi_allreduce_2_ranks"].startswith("ok Open MPI"), said
    assert said["mpi_built_with_cuda_support"] == "true", said
    assert said["queues"] == "gpu", said
    assert Path(said["image"], ".singularity.d").is_dir(), said
