"""A grade report and its parts: test results, the speedup figure, scaling tables, the speedup's
credit, and where the grading ran."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from runners.protocol.backends import SANDBOX_BACKENDS
from runners.protocol.base import PROTOCOL_VERSION, Frozen
from runners.protocol.verdicts import TestOutcome, Verdict


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
    held_message: str | None = Field(
        default=None, description="Hidden tests: the message a visible test would carry (the "
        "assertion's values, the traceback of the student's code) where it differs from "
        "`message`; the server shows it to the student only where the package or the course "
        "reveals that test (after the deadline, or always), and to the staff")
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
    anchor: Anchor | None = Field(
        default=None, description="Where the figure is anchored to the reference (median and "
        "CI are then the reference's speedup × the submission's ratio to it); None: the plain "
        "ratio to the serial baseline")


class Anchor(Frozen):
    """A speedup anchored to the reference (runners/measure/anchor.py): the submission timed
    beside the package's reference solution on the same cores, in the same turns, and that
    ratio scaled by the reference's own speedup over the serial baseline, measured beforehand."""

    reference_speedup: float = Field(gt=0, description="The reference's speedup over the serial "
                                     "baseline on this runner class, measured at validation")
    versus_reference: float = Field(description="Median over timed turns of T_reference / "
                                    "T_submission: above 1, faster than the reference")
    versus_ci_low: float
    versus_ci_high: float
    reference_median_s: float
    turns: int = Field(description="Timed turns with both the reference and the submission")
    baseline_speedup: float = Field(description="This grading's own ratio to the serial "
                                    "baseline (the figure before anchoring), for comparison")
    cores_versus_reference: float | None = Field(
        default=None, description="Median over the same turns of the submission's busy cores "
        "over the reference's (CPU seconds per wall second of each call); None where CPU time "
        "was not read")
    reference_measured: float | None = Field(
        default=None, gt=0, description="The reference's own ratio to the serial baseline in "
        "this grading's turns (the baseline placed as for the plain figure): one more "
        "measurement of the reference's speedup, which the server pools over the gradings of "
        "the version (server/services/grades/reference.py)")


class Interference(Frozen):
    """The node's capacity around one worker count's timed windows (runners/measure/capacity.py)."""

    cores: int = Field(description="Cores the submission's side was allotted")
    windows: int = Field(description="Timed windows probed (A/B pairs of calls, or blocks)")
    short: int = Field(description="Windows in which the node delivered under 90 % of the cores")
    retimed: int = Field(description="Short windows whose calls were timed again")
    delivered: float | None = Field(description="Median cores the node delivered in the short "
                                    "windows (None: none was short)")
    unreliable: bool = Field(description="Most counted windows were short (the node did not "
                             "come back within twice the timing budget): the node was busy, "
                             "and the speedup measured on it says little")
    waiting: float | None = Field(
        default=None, description="Median share of a probe's spin its process waited runnable "
        "for a CPU (the kernel's run delay, /proc/PID/schedstat), with the submission frozen or "
        "gone: other work on the cores, never the submission's own workers (None: not read)")
    baseline_waiting: float | None = Field(
        default=None, description="Median share of its timed calls in a window the serial "
        "baseline's threads waited runnable for a CPU (their run delay, read from outside), "
        "alone on the node but for other work: a window counts no more cores than it left "
        "(None: not read)")
    calibrated: bool = Field(default=False, description="The probes were compared with the "
                             "host's idle calibration (`paragrade runner calibrate`), not only "
                             "with their own recent past")
    pressure: float | None = Field(default=None, description="The node's CPU pressure when "
                                   "timing ended (/proc/pressure/cpu some avg10, %; None: no PSI)")


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


class DeviceWork(Frozen):
    """What the submission's timed calls did on the GPU, read by the grader through the driver
    (NVML), outside the sandbox (real GPUs only: runners/measure/devicework.py)."""

    calls: int = Field(description="The submission's timed calls watched")
    on_gpu_calls: int | None = Field(description="Calls during which a process of the "
                                     "submission's sandbox held a context on the GPU (None: not "
                                     "measurable on this runner)")
    moved_bytes: float | None = Field(description="Bytes the GPU's PCIe link moved per call, "
                                      "both ways (median; None: not measurable on this GPU)")
    input_bytes: float = Field(description="Bytes of a call's array arguments (median)")
    baseline_moved_bytes: float | None = Field(
        default=None, description="The same for the baseline's calls, which run on the CPU: "
        "the link's own traffic")
    memory_bytes: int | None = Field(default=None, description="The most device memory a "
                                     "process of the submission held (None: not reported)")
    counter: str = Field(description="How the link's bytes were read")


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
    device: DeviceWork | None = Field(
        default=None, description="What the submission did on the GPU; None: not a GPU run, "
        "or not measurable")
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


CreditStatus = Literal["credited", "capped", "held", "refused", "pending"]


class Credit(Frozen):
    """How much of the measured speedup earns performance points, and why (scoring.credit)."""

    policy: Literal["parallel", "any"]
    status: CreditStatus = Field(description="credited: all of it; capped: the part parallelism "
                                 "explains; held: points pending an instructor's review; "
                                 "refused: no performance points; pending: the node was busy, "
                                 "so the speedup is timed again once it is free")
    speedup: float = Field(description="The speedup the performance points come from (held and "
                           "refused: none until an instructor grants the measured one)")
    measured: bool = Field(description="False where the backend could not measure CPU time")
    reason: str = Field(description="One plain sentence with the figures")


BUSY_PROBE_WAITING = 0.02
"""A node is busy, not only slow, where its probes waited for a CPU more than this share of
their spin (median): quiet gradings here read 0.005–0.010, beside one spinner 0.03–0.51."""
BUSY_BASELINE_WAITING = 0.01
"""… or the serial baseline waited more than this share of its timed calls (median): quiet
0.001–0.002, beside one spinner 0.012–0.026, beside three or four 0.13–0.16."""


BUSY_BASELINE_ALONE = 0.03
"""… and the baseline's wait alone says so above this, however few windows read short: a final
run's turn on a 2 s share had 1 of 3 windows short beside three spinners while the baseline
waited 0.068 (its figure 2.79×, over the cores); quiet turns there 0.003–0.009."""


def node_was_busy(seen: Interference | None) -> bool:
    """Whether other work kept the node busy around the timed windows: the serial baseline
    waited for a CPU well above a quiet node's share (`BUSY_BASELINE_ALONE`: the kernel's own
    account of its timed calls, whatever the cores' rates said), or most windows were short and
    the run queue says why (the probes or the baseline waited). Short windows alone, with
    nobody waiting, are a host that slowed its cores (an idle VM's rates drift by 15 %): the
    figure says it was measured under interference and is timed again once, but no performance
    points wait on it. Where the kernel keeps no run delay, short windows decide."""
    if seen is None:
        return False
    if (seen.baseline_waiting or 0.0) > BUSY_BASELINE_ALONE:
        return True
    if not seen.unreliable:
        return False
    if seen.waiting is None and seen.baseline_waiting is None:
        return True
    return ((seen.waiting or 0.0) > BUSY_PROBE_WAITING
            or (seen.baseline_waiting or 0.0) > BUSY_BASELINE_WAITING)


def timed_on_a_busy_node(speedup: SpeedupFigure | None) -> bool:
    """Whether a figure was timed while other work kept the node busy (`node_was_busy`): a
    live grading's performance points then wait for a free node, a final run's turn settles
    nothing."""
    return node_was_busy(speedup.interference if speedup is not None else None)


def measured_under_interference(speedup: SpeedupFigure | None) -> bool:
    """Whether most of a figure's timed windows found the node short, for whatever reason, or
    the node was busy (`node_was_busy`: the baseline's own wait decides alone): the server
    times it again, later (server/services/fleet/retiming.py)."""
    seen = speedup.interference if speedup is not None else None
    return seen is not None and (seen.unreliable or node_was_busy(seen))


CORES_TOLERANCE = 0.15
"""A speedup up to cores × (1 + this) counts as within the cores (timing noise on 2 vCPUs)."""


def most_cores_give(cores: float) -> float:
    """The highest speedup (or count of busy cores) `cores` cores can give: the one cap the
    credit rule and the leaderboard's granted figures share."""
    return cores * (1 + CORES_TOLERANCE)


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
    if credit.status in ("held", "refused", "pending"):
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
    backend: str = Field(description="Sandbox backend: " + ", ".join(SANDBOX_BACKENDS))
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


class ProfiledProcess(Frozen):
    """One process of a profiled call (a pool's worker, an MPI rank), as its busiest thread
    spent the call."""

    label: str
    started_in_call: bool = Field(description="Started during the call (a pool's worker), not "
                                  "before it (the harness, an MPI rank)")
    samples: int
    running: float = Field(description="Share of its samples running Python code")
    waiting: float = Field(description="Share blocked: a lock, a queue, a pipe, sleep, select")
    in_mpi: float = Field(description="Share on a line of the student's code calling MPI (in "
                          "the collective or the message)")
    timeline: list[tuple[float, float, str]] = Field(
        description="(start s, end s, 'run' | 'wait' | 'mpi') from the process's first "
        "sample in the call (a worker started during it begins later)")
    node: str | None = Field(default=None, description="The node it ran on (runs over "
                             "several nodes; None on one)")
    thread: str | None = Field(default=None, description="One thread of it (a process whose "
                               "threads shared the work: a row each); None: the process as its "
                               "busiest thread spent the call")


class ProfiledFunction(Frozen):
    name: str
    file: str
    line: int
    share: float = Field(description="Share of all processes' running samples spent here")
    own: bool = Field(description="In the student's own files")


class FlameStack(Frozen):
    """One call stack of a profile's flame graph (outermost first, the platform's harness left
    out) and how many samples ended on it."""

    frames: list[str]
    samples: int
    own: list[bool] = Field(description="Per frame: in the student's own files")


class GpuKernel(Frozen):
    name: str = Field(description="The kernel as the line that launched it names it")
    share: float = Field(description="Share of the call's host time in its launches")


class GpuTime(Frozen):
    """Where a GPU call's time went, as the host's samples show it: in kernels, in copies
    between host and device, on the host."""

    kernels: float
    copies: float
    host: float
    per_kernel: list[GpuKernel]
    simulated: bool = Field(description="The numba CUDA simulator on a CPU, not a GPU")
    note: str


class Profile(Frozen):
    """Where the time of one untimed call went, every process sampled from outside the sandbox
    (runners/measure/profile.py); never a timed call."""

    sampler: str
    interval_s: float
    seconds: float = Field(description="The profiled call's wall time")
    processes: list[ProfiledProcess]
    top: list[ProfiledFunction]
    balance: float | None = Field(description="The busiest worker's running share over the "
                                  "workers' mean (the processes the call started, else every "
                                  "process; 1: even; None: one process)")
    note: str | None = None
    flame: list[FlameStack] = Field(
        default_factory=list, description="The call's stacks for a flame graph (the most "
        "sampled first, at most FLAME_STACKS)")
    gpu: GpuTime | None = Field(default=None, description="A GPU call's kernels, copies and "
                                "host time (None: not a GPU task)")
    cost_s: float | None = Field(default=None, description="Runner seconds the profile took "
                                 "(after a graded grading: what opting in costs)")


class GradeReport(Frozen):
    """Everything a grading produced; stored by the server, shown to the student."""

    protocol_version: int = PROTOCOL_VERSION
    assignment: str = Field(description="course/slug")
    assignment_version: str
    verdict: Verdict
    summary: str = Field(description="One line a student reads first")
    practice: bool = Field(default=False, description="A practice run (runners/grading/"
                           "practice.py): the public tests only, never graded; no points")
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
    profile: Profile | None = Field(default=None, description="A practice run's profile of one "
                                    "untimed call (None: not asked for)")
    notes: list[str] = Field(description="Labels such as 'simulated: no speedup points'")
    output_excerpt: str = Field(description="Capped stdout/stderr of the submission's runs")
    seed: int = Field(description="Seed the grader drew this run's inputs from")
    environment: Environment
    started_at: str
    wall_time_s: float = Field(description="Whole grading, platform overhead included")
    timed_time_s: float = Field(description="Sum of the timed runs it contains")
