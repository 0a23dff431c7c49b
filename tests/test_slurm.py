"""The SLURM backend against a real single-node SLURM cluster started by the suite."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from runners import package
from runners.grading import measuring
from runners.nodes import slurm
from runners.protocol import Verdict
from runners.runs import array, configure
from runners.runs.stage import Stage
from runners.sandbox import create_executor
from runners.settings import REPO_ROOT, RunnerSettings
from tests.conftest import COURSE
from tests.slurm_cluster import SlurmCluster, missing

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
QUICK = Path(__file__).parent / "fixtures" / "queue" / "quick"
SWEEP = REPO_ROOT / "assignments" / "parallel-python" / "slurm-array"


@pytest.fixture(scope="module")
def shared() -> Iterator[Path]:
    """A folder the munge user and the sandbox user can reach (pytest's tmp dirs are 0700)."""
    root = Path(tempfile.mkdtemp(prefix="paragrade-slurm-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(shared: Path) -> Iterator[SlurmCluster]:
    why = missing()
    if why:
        pytest.skip(why)
    c = SlurmCluster(shared / "cluster").start()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", str(c.conf))  # srun, sinfo and scancel find the cluster
        yield c
    c.stop()


@pytest.fixture
def settings(shared: Path) -> RunnerSettings:
    scratch = Path(tempfile.mkdtemp(dir=shared))
    scratch.chmod(0o755)
    return RunnerSettings(backend="slurm", scratch_dir=scratch)


def _job(cluster: SlurmCluster, name: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", "--oneliner"], env=cluster.env,
                         capture_output=True, text=True).stdout
    lines = [line for line in out.splitlines() if f"JobName={name} " in line]
    assert len(lines) == 1, out
    return lines[0]


def test_a_two_rank_mpi_job_is_graded_on_the_cluster(cluster: SlurmCluster,
                                                      settings: RunnerSettings) -> None:
    # The hidden tests run the reference on 2 MPI ranks (timing is covered by test_course).
    a = package.load(COURSE / "t2-mpi")
    report = slurm.grade(a, package.code_of(a, "reference"), settings=settings, time_limit_s=600,
                         tag="t2-ref", with_timing=False)
    assert report.verdict is Verdict.PASSED, report.summary
    assert report.tests and all(t.outcome.value == "passed" for t in report.tests)
    job = _job(cluster, "paragrade-t2-ref")
    assert "JobState=COMPLETED" in job and "OverSubscribe=NO" in job  # a whole node, alone


def test_a_wrong_solution_fails_there_and_validation_runs_there(
        cluster: SlurmCluster, settings: RunnerSettings) -> None:
    a = package.load(QUICK)
    wrong = {"solution.py": b"def total(n, workers=1):\n    return 0\n"}
    report = slurm.grade(a, wrong, settings=settings, time_limit_s=120, tag="wrong")
    assert report.verdict is Verdict.FAILED
    assert any("wrong sum" in t.message for t in report.tests if t.hidden)
    checks = slurm.validate(a, settings=settings, time_limit_s=300, tag="val")
    assert [c.name for c in checks if not c.ok] == [] and len(checks) >= 4
    # srun has returned; slurmctld may still show the job COMPLETING for a moment (its epilog).
    deadline = time.monotonic() + 20
    while "JobState=COMPLETING" in (job := _job(cluster, "paragrade-val")) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "JobState=COMPLETED" in job, job


def test_the_runner_token_never_reaches_the_job(cluster: SlurmCluster,
                                                settings: RunnerSettings,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARAGRADE_RUNNER_TOKEN", "secret-token-must-not-travel")
    a = package.load(QUICK)
    argv = slurm._srun(settings, a, "paragrade-env", 60, ["--help"])
    env_arg = next(x for x in argv if x.startswith("--export="))
    assert "TOKEN" not in env_arg and "ALL" not in env_arg
    # What a job actually sees: only the exported names (and SLURM's own).
    probe = [*argv[:argv.index("-m") - 1], "/usr/bin/env"]  # the allocation, running env
    out = subprocess.run(probe, capture_output=True, text=True, env=cluster.env | {
        "PARAGRADE_RUNNER_TOKEN": "secret-token-must-not-travel"}).stdout
    assert "secret-token" not in out and "PARAGRADE_BACKEND=bwrap" in out


def test_a_runner_on_the_login_node_grades_through_slurm(cluster: SlurmCluster,
                                                        settings: RunnerSettings,
                                                        tmp_path: Path) -> None:
    from tests.server.live import Platform, wait_until

    scratch = settings.scratch_dir
    p = Platform(tmp_path, f"sqla+sqlite:///{tmp_path / 'broker.sqlite'}",
                 assignments_dir=QUICK.parent)
    try:
        ada = p.student("ada", p.course("quick"))
        p.start_runner("login-node", "cpu", env={"PARAGRADE_BACKEND": "slurm",
                                                 "PARAGRADE_SCRATCH_DIR": str(scratch),
                                                 "SLURM_CONF": str(cluster.conf)})
        wait_until("validation through SLURM", lambda: p.get(
            p.prof, "/api/courses/c/assignments/quick")["validation"] == "ready", 120)
        sid = p.submit(ada, "quick", (QUICK / "reference" / "solution.py").read_bytes())
        done = wait_until("the grade", lambda: (lambda s: s if s["status"] == "graded" else None)(
            p.get(ada, f"/api/submissions/{sid}")), 120)
        assert done["verdict"] == "passed"
        [runner] = p.get(p.prof, "/api/fleet")["runners"]
        assert runner["capabilities"]["backend"] == "slurm"
        assert "RUNNING" not in subprocess.run(["squeue", "-h"], env=cluster.env,
                                               capture_output=True, text=True).stdout
    finally:
        p.close()


def test_a_job_array_package_runs_its_tasks_through_sbatch(cluster: SlurmCluster,
                                                           settings: RunnerSettings) -> None:
    # The engine's job takes one core; every array of the hidden tests is an sbatch --array
    # submitted from the node, each task a sandbox in its own allocation.
    a = package.load(SWEEP)
    report = slurm.grade(a, package.code_of(a, "reference"), settings=settings, time_limit_s=600,
                         tag="sweep", with_timing=False)
    assert report.verdict is Verdict.PASSED, report.summary
    assert "NumCPUs=1 " in _job(cluster, "paragrade-sweep")
    out = subprocess.run(["scontrol", "show", "job", "--oneliner"], env=cluster.env,
                         capture_output=True, text=True).stdout
    tasks = [line for line in out.splitlines() if "JobName=paragrade-array-" in line]
    assert tasks and all("JobState=COMPLETED" in t for t in tasks)
    assert "ArrayTaskId=4 " in out  # the five-task test ran as a five-task array


def test_an_array_is_timed_from_the_tasks_own_records(cluster: SlurmCluster,
                                                      settings: RunnerSettings) -> None:
    a = package.load(SWEEP)
    slurm_settings = settings.model_copy(update={"array_launcher": "slurm"})
    hook = measuring.load_hook(a)
    # Three times the timed input's grid: each task then outweighs its sandbox's start (which
    # every task pays, the baseline's one task once), and the bound below reads the records, not
    # a slow start (at the timed size a 0.3-s start took the reference to 0.94 of the baseline).
    rng = np.random.default_rng(5)
    inputs = {**hook.make_input(rng, 2), "grid": hook.make_grid(rng, per_epochs=9)}
    stage = Stage(scratch=settings.scratch_dir)
    try:
        made = {}
        for role, tasks, slots in (("baseline", 1, 1), ("reference", 4, 2)):
            cfg = configure.make_config(a, executor=create_executor(slurm_settings, "bwrap"),
                                        stage=stage, code_dir=stage.add_code(role, package.code_of(
                                            a, role)), cpus=[0, 1], workers=slots, gpu_mode="none",
                                        settings=slurm_settings)
            made[role] = array.run(cfg, "run_task", inputs, n_tasks=tasks, concurrency=slots,
                                   settings=slurm_settings, assignment_root=a.root)
            assert hook.check(inputs, made[role].values) is None
    finally:
        stage.cleanup()
    # Four balanced tasks on two slots: well under the serial sweep, though SLURM left seconds
    # between the tasks (the makespan leaves the dispatch gaps out).
    assert 0 < made["reference"].makespan_s < 0.9 * made["baseline"].makespan_s, made


def test_cpu_time_is_measured_on_the_compute_node(cluster: SlurmCluster,
                                                  settings: RunnerSettings) -> None:
    # Speedup credit through SLURM: the engine on the node reads its sandboxes' cgroups.
    a = package.load(COURSE / "t1-multiprocessing")
    cheat = (REPO_ROOT / "tests" / "fixtures" / "cheats" / "t1_closed_form.py").read_bytes()
    report = slurm.grade(a, {"solution.py": cheat}, settings=settings, time_limit_s=600,
                         tag="credit")
    assert report.verdict is Verdict.PASSED, report.summary
    assert report.scaling and report.scaling[-1].cpu is not None
    assert report.credit is not None and report.credit.status == "refused", report.credit
    assert report.performance_points == 0


def test_a_final_runs_turn_is_timed_only_there(cluster: SlurmCluster,
                                              settings: RunnerSettings) -> None:
    """A final run's turn through SLURM is what it is on the runner (the server vouches for the
    tests): no test runs, the headline worker count alone, on its share of the budget."""
    a = package.load(COURSE / "t1-multiprocessing")
    assert len(a.scaling_workers) > 1
    report = slurm.grade(a, package.code_of(a, "reference"), settings=settings, time_limit_s=600,
                         tag="final-turn", timing_only=True, timing_share=0.3)
    assert report.tests == [], [t.name for t in report.tests]
    assert [p.workers for p in report.scaling] == [max(a.scaling_workers)], report.scaling
    assert report.speedup is not None, report.summary
