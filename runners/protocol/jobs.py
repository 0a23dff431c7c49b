"""The messages between the server and a runner: jobs, claims, heartbeats and outcomes."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from runners.protocol.base import PROTOCOL_VERSION, Frozen
from runners.protocol.queues import Queue
from runners.protocol.report import GradeReport
from runners.protocol.similarity import SimilarityJob, SimilarityResult

Practice = Literal["tests", "timed"]
"""What a practice run does: the public tests, or those and one short timing."""


class GradeJob(Frozen):
    """A grading request as it crosses the queue: ids and data only."""

    protocol_version: int = PROTOCOL_VERSION
    submission_id: int = Field(description="The submission graded (a practice run's own id "
                               "where `practice` is set)")
    assignment: str = Field(description="course/slug")
    assignment_version: str
    bundle_sha256: str = Field(description="Content hash of the assignment bundle to fetch")
    submission_sha256: str = Field(description="Content hash of the submission archive to fetch")
    queue: Queue
    time_limit_s: int
    entry_file: str = Field(description="Name the submission's main file is graded under")
    reference_speedup: float | None = Field(
        default=None, description="The reference's speedup measured when this version was "
        "validated and in its gradings since (server/services/grades/reference.py; a final run's "
        "turns: the figure at the run's start): a function entry's figure is anchored to it "
        "(the reference timed beside the submission), and on a GPU a speedup far above it is "
        "held for review")
    reference_test_seconds: dict[str, float] = Field(
        default_factory=dict, description="The reference's seconds per test at validation "
        "(test name -> seconds): each test's time limit is calibrated from them "
        "(runners/grading/runaway.py)")
    timing_only: bool = Field(
        default=False, description="A final run's turn: this submission passed the hidden tests "
        "of this very version already, so only its speedup is measured (every timed answer "
        "is still checked)")
    timing_share: float = Field(
        default=1.0, gt=0, le=1, description="The part of the timing budget this job spends (a "
        "final run splits one grading's budget over its rounds, each spending its part on the "
        "top worker count alone)")
    practice: Practice | None = Field(
        default=None, description="A practice run, never graded: `tests` runs the public tests "
        "only (never the hidden ones), `timed` adds one short timing at the top worker count "
        "(runners/grading/practice.py)")
    profile: bool = Field(default=False, description="A profile too: where the time of one "
                          "untimed call went, every process sampled from outside "
                          "(runners/measure/profile.py); a graded job's after its timing, where "
                          "the assignment opted in")


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


class JobOffer(Frozen):
    """What a runner gets when it claims a job: the job and a secret valid for this job only."""

    job_id: int
    token: str = Field(description="Bearer secret for this job's bundle, archive and result")
    job: GradeJob | None = Field(default=None, description="A grading (or else `validate`)")
    validate_job: ValidateJob | None = Field(default=None, description="A package validation")
    similarity_job: SimilarityJob | None = Field(default=None, description="A similarity run")


BUSY_PRESSURE = 10.0
"""CPU pressure (`some avg10`, %) above which a node counts as busy: other work kept a runnable
task waiting for a CPU more than this share of the last 10 s (an idle node here reads 0–2 %)."""

MAX_ROW_ID = 2**31 - 1
"""The largest id a server row can have (INTEGER columns: 32-bit on PostgreSQL); an id past it
in a request is a 422, never a database error."""


class RunnerHello(Frozen):
    """What a runner announces when it joins the fleet (and repeats with each heartbeat)."""

    protocol_version: int = PROTOCOL_VERSION
    name: str = Field(min_length=1, max_length=200, pattern=r"^[^\x00]*$")
    queues: list[Queue] = Field(min_length=1)
    backend: str = Field(max_length=40, pattern=r"^[^\x00]*$",
                         description="bwrap | docker | apptainer | slurm | process")
    cores: int = Field(ge=1, le=1 << 20)
    memory_mb: int = Field(ge=0, le=1 << 40)
    gpus: int = Field(default=0, ge=0, le=1024)
    gpu_model: str | None = Field(default=None, max_length=200, pattern=r"^[^\x00]*$")
    mpi: str | None = Field(default=None, max_length=200, pattern=r"^[^\x00]*$",
                            description="The MPI the sandbox runtime ships, if any")
    image: str | None = Field(default=None, max_length=300, pattern=r"^[^\x00]*$",
                              description="Container image (and digest) the backend runs")
    current_job: int | None = Field(default=None, ge=1, le=MAX_ROW_ID,
                                    description="The job it is grading now")
    nodes: int = Field(default=1, ge=1, le=4096, description="Nodes it holds for multi-node "
                       "MPI jobs (itself included)")
    pressure: float | None = Field(default=None, ge=0, le=100, description="The node's CPU "
                                   "pressure as it says hello (/proc/pressure/cpu some avg10, "
                                   "%): other work that keeps its cores busy; None: no PSI")


class JobOutcome(Frozen):
    """What a runner posts back: a report or checks, or why the platform could not produce one."""

    report: GradeReport | None = None
    checks: list[ValidationCheck] | None = Field(default=None, description="For validate jobs")
    similarity: SimilarityResult | None = Field(default=None, description="For similarity runs")
    platform_error: str | None = Field(
        default=None, description="Set when grading failed for a reason not the student's")


class JobHandBack(Frozen):
    """A runner gives a claimed job back untouched: it is leaving (its allocation ends, its node
    is taken back) before the job could finish. The job is queued again, and the attempt is not
    counted: nothing was measured, so nothing is anyone's fault."""

    reason: str = Field(min_length=1, max_length=500, description="Why, in the runner's words")
