"""The contract between processes: grading jobs, grade reports and verdicts.

This is the only runners module the server imports. Every model is frozen and versioned; a
change to a field's meaning bumps PROTOCOL_VERSION.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

PROTOCOL_VERSION = 5
"""2: reports carry the speedup credit and CPU figures, jobs the reference's speedup, checks a
figure (an older server refuses those fields: upgrade servers before runners). 5: a speedup
carries what the node delivered around its timed windows (`Interference`); the reference's
seconds per test go from validation to every grading (per-test time limits)."""
MANIFEST = "assignment.toml"
QUEUES = ("cpu", "mpi", "gpu", "mpinodes")
Queue = Literal["cpu", "mpi", "gpu", "mpinodes"]
"""mpinodes: MPI jobs whose ranks span several nodes, served by runners that hold a gang."""
TASK_NAME = "paragrade.run_job"
"""The one Celery task: its only argument is a job id; the runner claims the job over HTTP."""
LOWEST_PRIORITY = 9
"""Broker priorities run 0 (first) to 9 (last); regrade-all uses the last."""


def broker_options(url: str, key_prefix: str = "") -> dict[str, object]:
    """Celery transport options both ends of the broker must agree on.

    Redis gets ten priority lists (0 served first) and an optional key prefix that keeps several
    deployments (or test runs) apart on one Redis. The embedded SQLite broker has neither.
    """
    if not url.startswith(("redis://", "rediss://")):
        return {}
    options: dict[str, object] = {"priority_steps": list(range(LOWEST_PRIORITY + 1)), "sep": ":",
                                  "queue_order_strategy": "priority"}
    if key_prefix:
        options["global_keyprefix"] = key_prefix
    return options
SLUG_RE = r"^[a-z0-9][a-z0-9-]{0,62}$"
_NAME_PART_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")


def check_relpath(name: str) -> str:
    """`name` if it is a safe relative file name (posix parts of letters, digits, `_.-`, no part
    starting with a dot, at most 8 deep), else ValueError saying why: manifests, uploads and the
    runner all check names with this before any file is written under them."""
    if not isinstance(name, str) or not name:
        raise ValueError("a file name must not be empty")
    if "\\" in name or "\x00" in name:
        raise ValueError(f"{name!r}: backslashes and NUL are not allowed in file names")
    if name.startswith("/"):
        raise ValueError(f"{name!r}: an absolute path is not allowed")
    parts = name.split("/")
    if len(parts) > 8:
        raise ValueError(f"{name!r}: nested too deep")
    for part in parts:
        if part in ("", ".", ".."):
            raise ValueError(f"{name!r}: empty, '.' and '..' path parts are not allowed")
        if not _NAME_PART_RE.match(part):
            raise ValueError(f"{name!r}: use letters, digits, '_', '.' and '-' only (no leading dot)")
    return name


class Frozen(BaseModel):
    """Base for every message: immutable, unknown keys refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Verdict(StrEnum):
    """Closed set of grading outcomes; `fault` says whose fault each one is."""

    PASSED = "passed"
    FAILED = "failed"
    TIMEOUT = "timeout"
    MEMORY_EXCEEDED = "memory_exceeded"
    CRASHED = "crashed"
    OUTPUT_EXCEEDED = "output_exceeded"
    FORBIDDEN = "forbidden"
    AUTHOR_ERROR = "author_error"
    PLATFORM_ERROR = "platform_error"

    @property
    def fault(self) -> Literal["student", "author", "platform"]:
        """Who is responsible for this verdict."""
        if self is Verdict.AUTHOR_ERROR:
            return "author"
        if self is Verdict.PLATFORM_ERROR:
            return "platform"
        return "student"


# When several tests end differently, the report's verdict is the most severe student verdict.
VERDICT_SEVERITY: tuple[Verdict, ...] = (
    Verdict.PLATFORM_ERROR,
    Verdict.AUTHOR_ERROR,
    Verdict.FORBIDDEN,
    Verdict.MEMORY_EXCEEDED,
    Verdict.OUTPUT_EXCEEDED,
    Verdict.TIMEOUT,
    Verdict.CRASHED,
    Verdict.FAILED,
    Verdict.PASSED,
)


class TestOutcome(StrEnum):
    """Outcome of one test."""

    __test__ = False  # not a pytest class

    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    SKIPPED = "skipped"


class TestResult(Frozen):
    """One test's outcome, as a student may see it."""

    __test__ = False

    name: str = Field(max_length=300,
                      description="Test name (file::function), stable across gradings")
    outcome: TestOutcome
    verdict: Verdict = Field(description="What this test's outcome means, from the closed set")
    message: str = Field(
        description="Human-readable reason; for hidden tests never the source or expected values"
    )
    hidden: bool = Field(description="True for hidden tests")
    weight: float = Field(ge=0, description="Share of the test points this test carries")
    duration_s: float = Field(ge=0)


class SpeedupFigure(Frozen):
    """Speedup over the serial baseline: median ratio with a nonparametric 95 % CI."""

    median: float
    ci_low: float
    ci_high: float
    baseline_median_s: float
    submission_median_s: float
    repetitions: int = Field(description="Timed runs per side")
    startup_baseline_s: float | None = Field(
        default=None, description="Script entries: median wall time of an empty script run the "
        "baseline's way (sandbox, launcher, interpreter), inside every baseline time")
    startup_submission_s: float | None = Field(
        default=None, description="The same under the submission's launcher and worker count")
    interference: Interference | None = Field(
        default=None, description="What the node delivered around the timed windows (None: "
        "not probed: a real GPU, or ranks on several nodes)")


class Interference(Frozen):
    """The node's capacity around one worker count's timed windows (runners/capacity.py)."""

    cores: int = Field(description="Cores the submission's side was allotted")
    windows: int = Field(description="Timed windows probed (A/B pairs of calls, or blocks)")
    short: int = Field(description="Windows in which the node delivered under 90 % of the cores")
    retimed: int = Field(description="Short windows whose calls were timed again")
    delivered: float | None = Field(description="Median cores the node delivered in the short "
                                    "windows (None: none was short)")
    unreliable: bool = Field(description="Most counted windows were short (the node did not "
                             "come back within twice the timing budget): the speedup was "
                             "measured under interference and may be low")


class Parallelism(Frozen):
    """What the CPU time of the timed calls says at one worker count: each call's CPU seconds
    are those of the whole sandbox (every process, thread and rank), read from outside it."""

    parallelism: float = Field(description="The submission's CPU seconds / wall seconds per "
                               "timed call (median): how many cores were busy")
    parallelism_ci_low: float
    parallelism_ci_high: float
    baseline_parallelism: float = Field(description="The same for the baseline (≈ 1: serial)")
    work_ratio: float = Field(description="The submission's CPU seconds per call / the "
                              "baseline's (medians): below 1 it did less work")
    work_ratio_ci_low: float
    work_ratio_ci_high: float
    submission_cpu_median_s: float
    baseline_cpu_median_s: float


class ScalingPoint(Frozen):
    """Strong-scaling result at one worker count."""

    workers: int = Field(ge=1, le=1 << 16)
    speedup: float
    efficiency: float = Field(description="speedup / workers")
    ci_low: float
    ci_high: float
    submission_median_s: float
    karp_flatt: float | None = Field(
        default=None, description="Experimentally determined serial fraction (workers > 1; "
        "None where the speedup is superlinear and the fraction would be negative)"
    )
    cpu: Parallelism | None = Field(
        default=None, description="Effective parallelism and work ratio; None: not measured")
    nodes: int = Field(default=1, ge=1, le=4096, description="Nodes the submission's ranks "
                       "spanned at this worker count (more than one: they talked over the network)")


class WeakScalingPoint(Frozen):
    """Weak scaling at one worker count: the problem grows with the workers, so the ideal time
    stays that of one worker on the one-worker size."""

    workers: int = Field(ge=1, le=1 << 16)
    efficiency: float = Field(description="T(1 worker, size 1) / T(workers, size ∝ workers)")
    ci_low: float
    ci_high: float
    one_worker_median_s: float
    submission_median_s: float


CreditStatus = Literal["credited", "capped", "held", "refused"]


class Credit(Frozen):
    """How much of the measured speedup earns performance points, and why (scoring.credit)."""

    policy: Literal["parallel", "any"]
    status: CreditStatus = Field(description="credited: all of it; capped: the part parallelism "
                                 "explains; held: points pending an instructor's review; "
                                 "refused: no performance points")
    speedup: float = Field(description="The speedup the performance points come from (held and "
                           "refused: none until an instructor grants the measured one)")
    measured: bool = Field(description="False where the backend could not measure CPU time")
    reason: str = Field(description="One plain sentence with the figures")


CORES_TOLERANCE = 0.15
"""A speedup up to cores × (1 + this) counts as within the cores (timing noise on 2 vCPUs)."""


def credited_speedup(credit: Credit | None, measured: float, *,
                     review: str | None = None) -> float | None:
    """The speedup performance points come from: the credited one; the measured one once an
    instructor granted a held or refused speedup (`review` "granted"), none once refused; None
    while it earns nothing."""
    if review == "granted":
        return measured
    if review == "refused":
        return None
    if credit is None:
        return measured
    if credit.status in ("held", "refused"):
        return None
    return credit.speedup


MpiGpuPath = Literal["CUDA-aware", "staged through the host"]


class Environment(Frozen):
    """Where the grading ran: enough to reproduce or to compare two gradings."""

    hostname: str
    cpu_model: str
    logical_cpus: int
    memory_mb: int
    core_set: list[int] = Field(description="CPUs the timed runs were confined to")
    core_set_enforced: bool = Field(description="True when a cgroup cpuset (not only affinity) held")
    backend: str = Field(description="Executor backend: bwrap, process, docker, apptainer")
    sandboxed: bool = Field(description="False for the unsafe 'process' backend")
    isolation: list[str] = Field(description="Limits that held: namespaces, cgroups, rlimits")
    gpu: str | None = Field(default=None, description="GPU model, or None")
    gpu_mode: Literal["none", "real", "simulated"] = "none"
    versions: dict[str, str] = Field(description="Python, numpy, numba, mpi4py, MPI, torch, CUDA")
    image_digest: str | None = None
    paragrade_version: str
    mpi_gpu_path: MpiGpuPath | None = Field(
        default=None, description="MPI jobs on a real GPU: whether the runtime's MPI takes device "
        "buffers (CUDA-aware) or they must be staged through host memory; None elsewhere")
    nodes: list[str] = Field(
        default_factory=list, description="Multi-node runs: each node the ranks ran on, with its "
        "hardware, the leader (rank 0, the clock) first; empty for one node")
    network: str | None = Field(
        default=None, description="Multi-node runs: the network joining the nodes' sandboxes")
    phases: dict[str, float] = Field(
        default_factory=dict, description="Wall seconds of the grading's phases: set-up, tests, "
        "timing (of which 'timed calls' is what the clock measured), start-up runs, report")


class GradeReport(Frozen):
    """Everything a grading produced; stored by the server, shown to the student."""

    protocol_version: int = PROTOCOL_VERSION
    assignment: str = Field(description="course/slug")
    assignment_version: str
    verdict: Verdict
    summary: str = Field(description="One line a student reads first")
    tests: list[TestResult]
    score: float
    max_score: float
    test_points: float
    performance_points: float
    speedup: SpeedupFigure | None = Field(
        description="None when not measured (tests failed, simulated GPU, no timing configured)"
    )
    scaling: list[ScalingPoint]
    weak_scaling: list[WeakScalingPoint] = Field(
        default_factory=list, description="Measured only where the package asks for it")
    serial_fraction: float | None = Field(description="Karp–Flatt at the largest worker count")
    amdahl_serial_fraction: float | None = Field(description="Least-squares Amdahl fit")
    credit: Credit | None = Field(default=None, description="None when no speedup was measured")
    notes: list[str] = Field(description="Labels such as 'simulated: no speedup points'")
    output_excerpt: str = Field(description="Capped stdout/stderr of the submission's runs")
    seed: int = Field(description="Seed the grader drew this run's inputs from")
    environment: Environment
    started_at: str
    wall_time_s: float = Field(description="Whole grading, platform overhead included")
    timed_time_s: float = Field(description="Sum of the timed runs it contains")


class GradeJob(Frozen):
    """A grading request as it crosses the queue: ids and data only."""

    protocol_version: int = PROTOCOL_VERSION
    submission_id: int
    assignment: str = Field(description="course/slug")
    assignment_version: str
    bundle_sha256: str = Field(description="Content hash of the assignment bundle to fetch")
    submission_sha256: str = Field(description="Content hash of the submission archive to fetch")
    queue: Queue
    time_limit_s: int
    entry_file: str = Field(description="Name the submission's main file is graded under")
    reference_speedup: float | None = Field(
        default=None, description="The reference's speedup measured when this version was "
        "validated (GPU packages: a speedup far above it is held for review)")
    reference_test_seconds: dict[str, float] = Field(
        default_factory=dict, description="The reference's seconds per test at validation "
        "(test name -> seconds): each test's time limit is calibrated from them "
        "(runners/runaway.py)")


class ValidateJob(Frozen):
    """Validate an imported package on a runner (reference passes, starter fails, …)."""

    protocol_version: int = PROTOCOL_VERSION
    version_id: int
    assignment: str = Field(description="course/slug")
    bundle_sha256: str
    queue: Queue


class ValidationCheck(Frozen):
    """One check of `paragrade assignments validate`."""

    name: str = Field(max_length=200)
    ok: bool
    problems: list[str] = Field(default_factory=list)
    skipped: str | None = None
    figure: float | None = Field(default=None, description="What the check measured, where it "
                                 "measured something (the reference's speedup)")
    test_seconds: dict[str, float] | None = Field(
        default=None, description="The 'reference passes' check: the reference's seconds per "
        "test, which gradings calibrate their per-test time limits from")


class SimilarityJob(Frozen):
    """Compare the chosen submissions of one assignment with each other (a similarity run).

    The runner fetches the package (its starter, baseline and reference are boilerplate, never
    evidence of copying) and one zip of the submissions, each under a folder named by its id."""

    protocol_version: int = PROTOCOL_VERSION
    run_id: int
    assignment: str = Field(description="course/slug")
    bundle_sha256: str
    submission_ids: list[int]
    threshold: float = Field(gt=0, le=1, description="Share of a submission's code found in the "
                                                     "other that makes a pair worth reporting")
    queue: Queue


class JobOffer(Frozen):
    """What a runner gets when it claims a job: the job and a secret valid for this job only."""

    job_id: int
    token: str = Field(description="Bearer secret for this job's bundle, archive and result")
    job: GradeJob | None = Field(default=None, description="A grading (or else `validate`)")
    validate_job: ValidateJob | None = Field(default=None, description="A package validation")
    similarity_job: SimilarityJob | None = Field(default=None, description="A similarity run")


class SimilarPair(Frozen):
    """Two submissions sharing code: each one's share found in the other, and where (1-based,
    inclusive line ranges of each one's `submission_text`)."""

    a: int = Field(description="Submission id")
    b: int = Field(description="Submission id")
    share_a: float = Field(ge=0, le=1, description="Share of a's code found in b")
    share_b: float = Field(ge=0, le=1, description="Share of b's code found in a")
    lines_a: list[tuple[int, int]] = Field(max_length=10_000)
    lines_b: list[tuple[int, int]] = Field(max_length=10_000)


class SimilarityResult(Frozen):
    pairs: list[SimilarPair] = Field(max_length=100_000,
                                     description="Pairs at or above the threshold, most similar "
                                                 "first")
    compared: int = Field(ge=0, description="Pairs compared")
    seconds: float = Field(ge=0)
    tool: str = Field(max_length=100, description="The comparing tool and its version")


def submission_text(files: dict[str, bytes], suffix: str = ".py") -> str:
    """What a similarity run compares of one submission: its source files in name order, each
    after a header line (line numbers in a SimilarPair count in this text)."""
    parts = [f"# ==== {name} ====\n" + content.decode("utf-8", "replace").rstrip("\n") + "\n"
             for name, content in sorted(files.items()) if name.endswith(suffix)]
    return "".join(parts)


class RunnerHello(Frozen):
    """What a runner announces when it joins the fleet (and repeats with each heartbeat)."""

    protocol_version: int = PROTOCOL_VERSION
    name: str = Field(min_length=1, max_length=200, pattern=r"^[^\x00]*$")
    queues: list[Queue] = Field(min_length=1)
    backend: str = Field(max_length=40, description="bwrap | docker | apptainer | slurm | process")
    cores: int = Field(ge=1, le=1 << 20)
    memory_mb: int = Field(ge=0, le=1 << 40)
    gpus: int = Field(default=0, ge=0, le=1024)
    gpu_model: str | None = Field(default=None, max_length=200, pattern=r"^[^\x00]*$")
    mpi: str | None = Field(default=None, max_length=200, pattern=r"^[^\x00]*$",
                            description="The MPI the sandbox runtime ships, if any")
    image: str | None = Field(default=None, max_length=300, pattern=r"^[^\x00]*$",
                              description="Container image (and digest) the backend runs")
    current_job: int | None = Field(default=None, description="The job it is grading now")
    nodes: int = Field(default=1, ge=1, le=4096, description="Nodes it holds for multi-node "
                       "MPI jobs (itself included)")


class JobOutcome(Frozen):
    """What a runner posts back: a report or checks, or why the platform could not produce one."""

    report: GradeReport | None = None
    checks: list[ValidationCheck] | None = Field(default=None, description="For validate jobs")
    similarity: SimilarityResult | None = Field(default=None, description="For similarity runs")
    platform_error: str | None = Field(
        default=None, description="Set when grading failed for a reason not the student's")


# --- Assignment package manifest (`assignment.toml`; documented in assignments/README.md) ---


class Entry(Frozen):
    """How the grader reaches the student's code."""

    style: Literal["function", "script"]
    file: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*\.(py|sh|sbatch)$",
                      description="A Python file; a batch script for launcher 'sbatch'")
    function: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    workers_arg: str | None = Field(
        default=None, description="Keyword the grader passes the worker count as"
    )
    allowed_files: list[str] = Field(default_factory=list)

    @field_validator("allowed_files")
    @classmethod
    def _safe_names(cls, names: list[str]) -> list[str]:
        return [check_relpath(n) for n in names]

    @model_validator(mode="after")
    def _function_named(self) -> Entry:
        if self.style == "function" and not self.function:
            raise ValueError("entry.style 'function' needs entry.function")
        return self


class Files(Frozen):
    """Folders of the package, relative to it."""

    starter: str = "starter"
    public_tests: str = "public_tests"
    hidden_tests: str = "hidden"
    baseline: str = "baseline"
    reference: str = "reference"
    data: str | None = None

    @field_validator("starter", "public_tests", "hidden_tests", "baseline", "reference", "data")
    @classmethod
    def _inside(cls, name: str | None) -> str | None:
        return None if name is None else check_relpath(name)


class Resources(Frozen):
    """What one grading needs from a runner."""

    kind: Literal["cpu", "mpi", "gpu"]
    cores: int = Field(ge=1, le=1024, description="All nodes' together")
    ranks: int = Field(default=1, ge=1, le=4096)
    nodes: int = Field(default=1, ge=1, le=64, description="Nodes the ranks may span (mpi only): "
                       "each has cores / nodes of the cores; a run uses as few as its ranks need")
    gpus: int = Field(default=0, ge=0, le=64)
    memory_mb: int = Field(default=2048, ge=64)
    pids: int = Field(default=1024, ge=16, le=65536, description="Processes and threads a run "
                      "may have at once (CUDA simulator runs: at least 1024 + the harness's)")
    wall_seconds: int = Field(default=120, ge=1, le=86400, description="Per sandboxed run")
    tests_seconds: int | None = Field(
        default=None, ge=1, le=86400, description="Runner seconds all tests of one grading may "
        "take before the next is not started (default 3 × wall_seconds, at least 60; "
        "runners/runaway.py)")
    simulate_gpu: bool = Field(
        default=False, description="Grade correctness under numba's CUDA simulator without a GPU"
    )
    image: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Resources:
        if self.kind == "gpu" and self.gpus < 1:
            raise ValueError("resources.kind 'gpu' needs resources.gpus >= 1")
        if self.kind != "gpu" and self.gpus:
            raise ValueError("resources.gpus is set but resources.kind is not 'gpu'")
        if self.nodes > 1:
            if self.kind != "mpi":
                raise ValueError("resources.nodes > 1 needs resources.kind 'mpi'")
            if self.cores % self.nodes:
                raise ValueError(f"resources.cores ({self.cores}) must divide evenly among "
                                 f"resources.nodes ({self.nodes})")
        return self

    @property
    def cores_per_node(self) -> int:
        return self.cores // self.nodes

    @property
    def queue(self) -> Queue:
        """The queue whose runners can serve this: multi-node jobs need a runner with a gang."""
        return "mpinodes" if self.nodes > 1 else self.kind


class Launcher(Frozen):
    kind: Literal["python", "mpirun", "torchrun", "sbatch"] = Field(
        default="python", description="sbatch: the entry is a SLURM batch script that starts "
        "the program (runners/batchscript.py says what it may say); it runs under MPI")


class Scoring(Frozen):
    test_points: float = Field(default=60, ge=0)
    credit: Literal["parallel", "any"] = Field(
        default="parallel", description="parallel: only speedup that parallel work explains "
        "earns points (GPU packages: a speedup far above the reference's is held for review); "
        "any: every measured speedup (competitions where algorithmic gains count)")
    reference_factor: float = Field(
        default=3.0, gt=1, description="GPU packages under 'parallel': a speedup above this "
        "many times the reference's (measured at validation) is held for review")
    performance_points: float = Field(default=40, ge=0)
    speedup_min: float = Field(default=1.0, gt=0)
    speedup_full: float = Field(default=2.0, gt=0)
    scaling_workers: list[int] = Field(default_factory=list)
    weights: dict[str, float] = Field(default_factory=dict)
    weak_share: float = Field(default=0.0, ge=0, le=1, description="Share of the performance "
                              "points earned by weak-scaling efficiency (timing.weak_scaling)")
    weak_efficiency_min: float = Field(default=0.5, gt=0, le=2)
    weak_efficiency_full: float = Field(default=0.9, gt=0, le=2)

    @model_validator(mode="after")
    def _curve(self) -> Scoring:
        if self.speedup_full <= self.speedup_min:
            raise ValueError("scoring.speedup_full must be greater than scoring.speedup_min")
        if any(w < 1 for w in self.scaling_workers):
            raise ValueError("scoring.scaling_workers must be positive")
        if self.weak_efficiency_full <= self.weak_efficiency_min:
            raise ValueError("scoring.weak_efficiency_full must be greater than "
                             "scoring.weak_efficiency_min")
        return self


def curve_share(speedup: float, speedup_min: float, speedup_full: float) -> float:
    """Share (0..1) of the performance points a speedup earns: linear from min to full."""
    return float(min(1.0, max(0.0, (speedup - speedup_min) / (speedup_full - speedup_min))))


def performance_share(scoring: Scoring, speedup: float, weak_efficiency: float | None = None, *,
                      speedup_min: float | None = None, speedup_full: float | None = None) -> float:
    """Share (0..1) of the performance points: the speedup curve, blended with the weak-scaling
    curve by `weak_share` where weak scaling was measured (the server passes its own curve)."""
    strong = curve_share(speedup, speedup_min or scoring.speedup_min,
                         speedup_full or scoring.speedup_full)
    if weak_efficiency is None or not scoring.weak_share:
        return strong
    weak = curve_share(weak_efficiency, scoring.weak_efficiency_min, scoring.weak_efficiency_full)
    return (1 - scoring.weak_share) * strong + scoring.weak_share * weak


class Timing(Frozen):
    enabled: bool = True
    hook: str = Field(default="timing.py", description="Module in the hidden tests folder: "
                      "make_input(rng, workers) -> kwargs and check(kwargs, value) for function "
                      "entries; make_args(rng, workers) -> argv and check(argv, result) for "
                      "script entries, timed as whole programs")
    budget_s: float = Field(default=30, gt=0, description="Wall time for the timed A/B runs")
    min_repetitions: int = Field(default=5, ge=3)
    max_repetitions: int = Field(default=40, ge=3)
    target_ci_width: float = Field(default=0.10, gt=0, description="Relative CI width at which "
                                   "the figures that earn no points stop (the headline stops "
                                   "once its CI fixes its points to within 1)")
    weak_scaling: bool = Field(default=False, description="Also measure weak scaling: the hook's "
                               "make_weak_input(rng, workers) sizes the problem ∝ workers")
    note: str | None = Field(default=None, max_length=300,
                             description="Shown with every measured speedup, e.g. what the timed "
                                         "region leaves out")


class Service(Frozen):
    """A trusted I/O service the sandboxed program reaches through a Unix socket (no network)."""

    hook: str = Field(default="service.py", description="Module in the hidden folder: "
                      "LATENCY_S and respond(request) -> str")
    max_connections: int = Field(default=64, ge=1, le=1024,
                                 description="Connections served at once; more are closed")


class Array(Frozen):
    """A job array: the submission's function is one task, `function(task_id=i, n_tasks=N, **inputs)`.

    Graded by running the tasks as independent sandboxes (an `sbatch --array` on a SLURM runner,
    concurrent local sandboxes otherwise); timing compares the array's makespan with the serial
    baseline run as one task."""

    tasks: int = Field(ge=1, le=10000, description="Array size: task ids 0 … tasks-1")


class Manifest(Frozen):
    """The whole `assignment.toml`."""

    schema_version: int = Field(default=1, alias="schema")
    slug: str = Field(pattern=SLUG_RE)
    title: str = Field(min_length=1)
    version: str = Field(pattern=r"^[0-9]+(\.[0-9]+)*$")
    statement: str = "statement.md"
    entry: Entry
    files: Files = Files()
    resources: Resources
    launcher: Launcher = Launcher()
    scoring: Scoring = Scoring()
    timing: Timing = Timing()
    service: Service | None = None
    array: Array | None = None

    @model_validator(mode="after")
    def _weak(self) -> Manifest:
        if self.entry.style == "script" and self.timing.weak_scaling:
            raise ValueError("script entries are timed as whole programs: no weak scaling")
        if self.scoring.weak_share and not self.timing.weak_scaling:
            raise ValueError("scoring.weak_share needs timing.weak_scaling = true")
        if self.resources.nodes > 1 and self.launcher.kind not in ("mpirun", "sbatch"):
            raise ValueError("resources.nodes > 1 needs launcher 'mpirun' or 'sbatch'")
        script = self.entry.file.endswith((".sh", ".sbatch"))
        if (self.launcher.kind == "sbatch") != script:
            raise ValueError("launcher 'sbatch' goes with a batch script entry (.sh, .sbatch), "
                             "and a batch script entry with launcher 'sbatch'")
        if script and (self.entry.style != "script" or self.resources.kind != "mpi"):
            raise ValueError("a batch script entry needs entry.style 'script' and "
                             "resources.kind 'mpi'")
        if script and self.scoring.scaling_workers not in ([], [self.resources.ranks]):
            raise ValueError("a batch script fixes its task count: scoring.scaling_workers "
                             f"may only be [{self.resources.ranks}] (resources.ranks)")
        if self.array is not None:
            if self.entry.style != "function" or self.launcher.kind != "python":
                raise ValueError("an [array] package needs a function entry and launcher 'python'")
            if self.timing.weak_scaling:
                raise ValueError("an [array] package cannot also measure weak scaling")
        return self
