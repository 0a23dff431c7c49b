"""An assignment package's manifest (`assignment.toml`; documented in assignments/README.md):
entry, files, resources, launcher, scoring and its curve, timing, service, job array."""

from __future__ import annotations

import difflib
import typing
from typing import Literal

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_core import ErrorDetails

from runners.protocol import text
from runners.protocol.base import Frozen
from runners.protocol.names import SLUG_RE, check_relpath
from runners.protocol.queues import Queue

MANIFEST = "assignment.toml"


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
        "runners/grading/runaway.py)")
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
        "the program (runners/runs/batchscript.py says what it may say); it runs under MPI")


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
    probe: bool = Field(default=True, description="Probe the node's cores around each timed "
                        "window and time again the windows it found short (runners/measure/capacity.py); "
                        "false where the speedup does not depend on the cores, e.g. overlapped "
                        "waiting on a [service]: every window counts, none is timed again")
    weak_scaling: bool = Field(default=False, description="Also measure weak scaling: the hook's "
                               "make_weak_input(rng, workers) sizes the problem ∝ workers")
    fresh_calls: bool = Field(default=False, description="Each timed call (and each warm-up) "
                              "runs in a fresh process, the submission imported before it "
                              "(untimed), and nothing a call leaves (a pool kept in a module "
                              "global, a file, a process) is there for the next: for packages "
                              "whose statement times the set-up (runners.runs.zygote.FreshCalls)")
    startup: Literal["included", "excluded"] = Field(
        default="included", description="Script entries, timed as whole programs: 'excluded' "
        "scores each run's time less its side's start-up (an empty script under the same "
        "launcher, timed apart: sandbox, launcher, interpreters, MPI's initialisation), as a "
        "course's own timer that starts once MPI is up; 'included': the whole program")
    inputs: int | None = Field(default=None, ge=1, le=64, description="Job arrays: how many "
                               "timed inputs each worker count draws, then times in turn "
                               "(default: a fresh one per run). For a hook whose check recomputes "
                               "each input's answers (a whole sweep): fewer inputs, fewer "
                               "recomputes. Every run's tasks still start in fresh sandboxes: "
                               "no run sees what another left")
    note: str | None = Field(default=None, max_length=300,
                             description="Shown with every measured speedup, e.g. what the timed "
                                         "region leaves out")

    @field_validator("note")
    @classmethod
    def _a_line(cls, value: str | None) -> str | None:
        return None if value is None else text.check(value, "timing.note")


class Service(Frozen):
    """A trusted I/O service the sandboxed program reaches through a Unix socket (no network)."""

    hook: str = Field(default="service.py", description="Module in the hidden folder: "
                      "LATENCY_S and respond(request) -> str")
    max_connections: int = Field(default=64, ge=1, le=1024,
                                 description="Connections served at once; more are closed")


Shown = Literal["never", "after_deadline", "always"]
"""When a student reads a hidden test's full message (its assertion's values, the traceback of
their code): never (the message its author wrote on purpose, or "wrong answer"), once their own
deadline has passed (extensions included), or always."""


class Feedback(Frozen):
    """What a report shows of the hidden tests (`[feedback]`); a course offering may change the
    default (the assignment's policy, server side)."""

    hidden_tests: Shown = "never"
    tests: dict[str, Shown] = Field(default_factory=dict, description="Per hidden test (its "
                                    "name, as in [scoring] weights): overrides hidden_tests")


class RubricEntry(Frozen):
    """One item of the package's rubric (`[[manual.rubric]]`): a grader applies its points."""

    title: str = Field(min_length=1, max_length=200)
    points: float = Field(ge=-1000, le=1000)
    group: str = Field(default="", max_length=100)
    description: str = Field(default="", max_length=5000)

    @field_validator("title", "group")
    @classmethod
    def _a_line(cls, value: str) -> str:
        return text.check(value, "manual.rubric")

    @field_validator("description")
    @classmethod
    def _paragraphs(cls, value: str) -> str:
        if (why := text.paragraphs_problem(value, "manual.rubric.description")) is not None:
            raise ValueError(why)
        return value


class ManualPart(Frozen):
    """Grading by a person (`[manual]`): the most points and their weight beside the
    autograder's, and the rubric a course starts from (its staff edit it in the browser)."""

    points: float = Field(default=0, ge=0, le=1000)
    weight: float = Field(default=1.0, ge=0, le=10)
    rubric: list[RubricEntry] = Field(default_factory=list, max_length=200)


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

    @field_validator("title")
    @classmethod
    def _title_a_line(cls, value: str) -> str:
        return text.check(value, "title")
    statement: str = "statement.md"
    entry: Entry
    files: Files = Files()
    resources: Resources
    launcher: Launcher = Launcher()
    scoring: Scoring = Scoring()
    timing: Timing = Timing()
    service: Service | None = None
    array: Array | None = None
    feedback: Feedback = Feedback()
    manual: ManualPart = ManualPart()

    @model_validator(mode="after")
    def _weak(self) -> Manifest:
        if self.timing.startup == "excluded" and self.entry.style != "script":
            raise ValueError("timing.startup = 'excluded' is for script entries (a function "
                             "entry's timed call has no start-up in it)")
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
        elif self.timing.inputs is not None:
            raise ValueError("timing.inputs is for [array] packages (each of their runs starts "
                             "its tasks in fresh sandboxes)")
        return self


def explain(error: ErrorDetails) -> str:
    """A manifest problem's reason as an author reads it: an unknown key with the known one it
    is closest to ("unknown key: did you mean 'wall_seconds'?"), else the validator's words."""
    loc = error["loc"]
    if error["type"] != "extra_forbidden" or not loc:
        return error["msg"]
    known = _keys_at(loc[:-1])
    close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
    hint = f": did you mean '{close[0]}'?" if close else (
        f" here (the keys are {', '.join(sorted(known))})" if known else "")
    return f"unknown key{hint}"


def _keys_at(loc: tuple[int | str, ...]) -> list[str]:
    """The keys the manifest accepts in the table at `loc`."""
    model: type[BaseModel] | None = Manifest
    for part in loc:
        if model is None:
            return []
        if isinstance(part, int):
            continue
        field = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        if field is None:
            return []
        model = _model_in(field.annotation)
    return [f.alias or n for n, f in model.model_fields.items()] if model is not None else []


def _model_in(annotation: object) -> type[BaseModel] | None:
    """The table type a field holds (itself, optional, or in a list)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for a in typing.get_args(annotation) if (m := _model_in(a)) is not None), None)
