"""pytest plugin for assignment tests: the `submission` fixture and the grader's result record.

Test files run on the trusted side with their expected values; each test's calls through
`submission` run in a fresh sandbox, or in a fresh child forked by a zygote (runners.runs.zygote).
Loaded by the grader as `pytest -p runners.grading.pytest_plugin`.
"""

from __future__ import annotations

import atexit
import json
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runners import package
from runners.grading.runaway import TestClock
from runners.grading.testrun import Context
from runners.package import Assignment
from runners.protocol import TestOutcome, Verdict
from runners.runs import array, authored, configure, service
from runners.runs.array import ArrayUnavailable
from runners.runs.failures import SubmissionFailure, SubmissionRaised
from runners.runs.launch import ScriptResult, run_script
from runners.runs.runconfig import RunConfig, with_wall
from runners.runs.session import Session
from runners.runs.stage import Stage
from runners.runs.zygote import ForkedSession, Zygote, ZygoteLost, preload_modules
from runners.sandbox import create_executor
from runners.settings import get_settings

OUTPUT_KEEP = 16 * 1024
Runs = tuple[Assignment, Callable[[int], RunConfig]]  # run_configs(): per process


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
        return configure.make_config(assignment, executor=executor, stage=stage,
                                     code_dir=Path(ctx.code_dir), cpus=ctx.cpus,
                                     workers=workers, gpu_mode=ctx.gpu_mode, serial=ctx.serial)

    return assignment, cfg_for


class Submission:
    """The code under test, callable from a test; each test gets a fresh sandbox, or a fresh
    child of the test process's zygote (`_ZygoteKeeper`)."""

    def __init__(self, ctx: Context, recorder: Recorder, runs: Runs,
                 wall_s: float | None = None) -> None:
        self._ctx = ctx
        self._recorder = recorder
        self._assignment, cfg_for = runs
        self._wall_s = wall_s  # this test's own time limit (None: the package's)
        self._cfg_for: Callable[[int], RunConfig] = lambda k: with_wall(cfg_for(k), wall_s)
        self._session: Session | None = None
        m = self._assignment.manifest
        self.workers: int = self._assignment.workers
        self.gpu_mode: str = ctx.gpu_mode
        self.simulated: bool = ctx.gpu_mode == "simulated"
        self.function: str | None = m.entry.function

    def _live(self) -> Session:
        if self._session is not None:
            return self._session
        cfg = self._cfg_for(self.workers)
        session: Session = _ZYGOTE.session(cfg, self._assignment, self._wall_s) or Session(cfg)
        try:
            try:
                session.start()
            except ZygoteLost:  # nothing of the submission ran: a sandbox of its own
                session = Session(cfg)
                session.start()
        except BaseException:
            session.close()
            self._recorder.add_output(session.output)
            raise
        self._session = session
        return session

    def call(self, function: str, *args: Any, **kwargs: Any) -> Any:
        """Call `function` of the submission with these arguments, in the sandbox."""
        return self.timed(function, *args, **kwargs)[0]

    def timed(self, function: str, *args: Any, **kwargs: Any) -> tuple[Any, float]:
        """Like `call`, also returning the seconds the call took (measured outside the sandbox)."""
        try:
            return self._live().call(function, *args, **kwargs)
        except SubmissionFailure:
            self.close()
            raise

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *a, **k: self.call(name, *a, **k)

    def array(self, n_tasks: int | None = None, *, concurrency: int | None = None,
              **inputs: Any) -> list[Any]:
        """Run an [array] package's tasks (0 … n_tasks-1, default the manifest's) as the grader
        does, each in its own sandbox (through SLURM on a SLURM runner); one value per task."""
        m = self._assignment.manifest
        if m.array is None:
            raise RuntimeError("submission.array() needs an [array] package")
        slots = concurrency or self.workers
        run = array.array_runner(self._assignment, self._cfg_for(slots), n_tasks or m.array.tasks,
                                  slots, get_settings())
        try:
            return run(inputs).values
        except SubmissionFailure as exc:
            self._recorder.add_output(exc.output)
            raise

    def run(self, *args: str, workers: int | None = None) -> ScriptResult:
        """Run a script entry as a program with these arguments; files it wrote in out/ come back."""
        result = run_script(self._cfg_for(workers or self.workers), [str(a) for a in args])
        self._recorder.add_output(result.output)
        return result

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._recorder.add_output(self._session.output)
            self._session = None


class _ZygoteKeeper:
    """The test process's zygote: one sandbox whose trusted process forks each test's child
    (runners.runs.zygote.Zygote), started again after a test that ended badly discarded it."""

    def __init__(self) -> None:
        self.zygote: Zygote | None = None
        self.refused = False  # it would not fork here (a preloaded library started a thread)

    def session(self, cfg: RunConfig, assignment: Assignment, wall_s: float | None
                ) -> ForkedSession | None:
        """The next test's child of the zygote (`wall_s`: its own time limit), or None where
        the test needs a sandbox of its own."""
        if self.refused or not get_settings().fork_tests or not Zygote.suits(cfg):
            return None
        if self.zygote is None or not self.zygote.usable:
            z = Zygote(cfg, preload_modules(package.code_of(assignment, "reference")),
                       jit_cache=get_settings().jit_cache)
            try:
                z.start()
            except (SubmissionFailure, SubmissionRaised, OSError):
                z.discard()
                return None
            if not z.usable:
                self.refused = True
                z.discard()
                return None
            self.zygote = z
        return self.zygote.session(wall_s)

    def close(self) -> None:
        if self.zygote is not None:
            self.zygote.discard()
            self.zygote = None


_ZYGOTE = _ZygoteKeeper()


class Recorder:
    """Collects each test's outcome in the shape of protocol.TestResult."""

    def __init__(self, ctx: Context, weights: dict[str, float]) -> None:
        self.ctx = ctx
        self.weights = weights
        self.results: list[dict[str, Any]] = []
        self.output = ""

    def add_output(self, text: str) -> None:
        if text and len(self.output) < OUTPUT_KEEP:
            self.output = (self.output + text)[:OUTPUT_KEEP]

    def hidden(self, path: str) -> bool:
        return Path(path).resolve().is_relative_to(Path(self.ctx.hidden_dir).resolve())

    def add(self, name: str, *, outcome: TestOutcome, verdict: Verdict, message: str, hidden: bool,
            weight: float | None, duration: float, held: str | None = None) -> None:
        if weight is None:
            weight = self.weights.get(name, 1.0 if hidden else 0.0)
        self.results.append(dict(name=name, outcome=outcome.value, verdict=verdict.value,
                                 message=message, hidden=hidden, weight=weight,
                                 duration_s=round(duration, 4),
                                 held_message=held if held != message else None))

    def write(self) -> None:
        Path(self.ctx.results).write_text(json.dumps({"tests": self.results,
                                                      "output": self.output}))


class NotRun(Exception):
    """A test the grading's time rules did not start (runners.grading.runaway); the reason is the message."""


def _name(item: pytest.Item, ctx: Context) -> str:
    """A test's name as reports and the reference's calibration know it."""
    rel = Path(str(item.path)).relative_to(ctx.assignment_root).as_posix()
    return f"{rel}::{item.name}"


def _describe(item: pytest.Item) -> str:
    """The test's docstring's first paragraph (a sentence may run over several lines), as one
    line; its name where it has none."""
    doc = getattr(getattr(item, "function", None), "__doc__", None) or ""
    first = doc.strip().split("\n\n")[0]
    return " ".join(line.strip() for line in first.splitlines())[:500] or item.name


def _authored_message(exc: AssertionError) -> str:
    """The message an author wrote in `assert x, "msg"`, without pytest's rendering of values."""
    if not exc.args:
        return ""
    lines = str(exc.args[0]).splitlines()
    kept: list[str] = []
    for line in lines:
        if line.startswith(("assert ", "assert(")) or line.lstrip().startswith(("+", "where")):
            break
        kept.append(line)
    return " ".join(kept).strip()[:500]


def _judge(item: pytest.Item, call: pytest.CallInfo[None], hidden: bool) -> tuple[Verdict, str]:
    """Verdict and message for a failed phase, revealing nothing hidden."""
    exc = call.excinfo.value if call.excinfo else None
    what = _describe(item).rstrip(".")  # "Ten numbers.: …" reads badly
    if isinstance(exc, SubmissionFailure):
        return exc.verdict, f"{what}: {exc.message}"
    if isinstance(exc, ArrayUnavailable):
        return Verdict.PLATFORM_ERROR, f"{what}: the job array could not run: {exc}"
    if isinstance(exc, SubmissionRaised):
        detail = f"\n{exc.traceback}" if not hidden and exc.traceback else ""
        return Verdict.CRASHED, f"{what}: your code raised {exc.type_name}: {exc.message}{detail}"
    if call.when != "call":
        return Verdict.AUTHOR_ERROR, f"{what}: the test's set-up failed ({type(exc).__name__})"
    if isinstance(exc, AssertionError):
        if hidden:
            # Only a message the author wrote on purpose; never pytest's rendering of the values.
            return Verdict.FAILED, f"{what}: {_authored_message(exc) or 'wrong answer'}"
        return Verdict.FAILED, f"{what}: {str(exc)[:3000]}"
    name = type(exc).__name__ if exc else "error"
    reason = "the checker could not use the value returned" if hidden else f"{name}: {exc}"
    return Verdict.FAILED, f"{what}: wrong answer ({reason})"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--paragrade-context", default=None, help="grading context JSON")


_recorder_key = pytest.StashKey[Recorder]()
_clock_key = pytest.StashKey[TestClock]()
_context_key = pytest.StashKey[Context]()
_runs_key = pytest.StashKey[Runs]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "weight(w): share of the test points this test carries")
    path = config.getoption("--paragrade-context")
    if path:
        ctx = Context.load(path)
        assignment = package.load(Path(ctx.assignment_root))
        weights = assignment.manifest.scoring.weights
        authored.open_path(assignment.hidden_dir)  # the hidden tests' helpers (runs/authored)
        if assignment.manifest.service is not None:
            service.load(assignment)  # importable by the hidden tests before they are collected
        config.stash[_context_key] = ctx
        config.stash[_recorder_key] = Recorder(ctx, weights)
        config.stash[_clock_key] = TestClock(ctx.tests_budget_s)


@pytest.fixture
def submission(request: pytest.FixtureRequest) -> Iterator[Submission]:
    """The code under test (see Submission)."""
    ctx = request.config.stash.get(_context_key, None)
    if ctx is None:
        pytest.fail("run these tests through paragrade (paragrade grade / assignments validate)")
    wall_s = ctx.test_limits.get(_name(request.node, ctx))
    if why := request.config.stash[_clock_key].why_not(wall_s):
        raise NotRun(why)
    runs = request.config.stash.get(_runs_key, None)
    if runs is None:  # one stage (harness and data copies) for all of this process's tests
        runs = request.config.stash[_runs_key] = run_configs(ctx)
    sub = Submission(ctx, request.config.stash[_recorder_key], runs, wall_s)
    try:
        yield sub
    finally:
        sub.close()


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """This grading's seed, mixed with the test's name: fresh inputs per grading."""
    ctx = request.config.stash.get(_context_key, None)
    base = ctx.seed if ctx else 0
    return (base * 1_000_003 + zlib.crc32(request.node.nodeid.encode())) % (2**63)


@pytest.fixture
def rng(seed: int) -> np.random.Generator:
    """A numpy Generator seeded per grading and per test."""
    return np.random.default_rng(seed)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    recorder = item.config.stash.get(_recorder_key, None)
    if recorder is None:
        return report
    name = _name(item, recorder.ctx)
    hidden = recorder.hidden(str(item.path))
    marker = item.get_closest_marker("weight")
    weight = float(marker.args[0]) if marker else None
    duration = getattr(report, "duration", 0.0)
    exc = call.excinfo.value if call.excinfo else None
    if isinstance(exc, NotRun):  # keeps its weight: a test not run earns nothing
        recorder.add(name, outcome=TestOutcome.SKIPPED, verdict=Verdict.TIMEOUT,
                     message=f"{_describe(item).rstrip('.')}: {exc}", hidden=hidden, weight=weight,
                     duration=duration)
    elif report.failed:
        verdict, message = _judge(item, call, hidden and not recorder.ctx.reveal)
        # The whole message too, held for the server to show where the test is revealed.
        held = _judge(item, call, False)[1][:3000] if hidden else None
        if verdict is Verdict.TIMEOUT and name in recorder.ctx.limit_reasons:
            message += f" (this test's limit: {recorder.ctx.limit_reasons[name]})"
            held = None
        outcome = TestOutcome.FAILED if call.when == "call" else TestOutcome.ERROR
        recorder.add(name, outcome=outcome, verdict=verdict, message=message, hidden=hidden,
                     weight=weight, duration=duration, held=held)
        item.config.stash[_clock_key].ended(name, verdict, recorder.ctx.test_limits.get(name))
    elif report.skipped and call.when in ("setup", "call"):
        reason = str(call.excinfo.value) if call.excinfo else "skipped"
        recorder.add(name, outcome=TestOutcome.SKIPPED, verdict=Verdict.PASSED,
                     message=f"{_describe(item).rstrip('.')}: skipped ({reason})", hidden=hidden,
                     weight=0.0, duration=duration)
    elif report.passed and call.when == "call":
        recorder.add(name, outcome=TestOutcome.PASSED, verdict=Verdict.PASSED,
                     message=_describe(item), hidden=hidden, weight=weight, duration=duration)
    return report


COLLECT_FAILED = "a test file could not be collected (assignment author's error)"

_collect_errors: dict[str, str] = {}
"""Where each test file that could not be collected failed (runs/authored.where), by node id."""


def pytest_exception_interact(node: pytest.Item | pytest.Collector, call: pytest.CallInfo[Any],
                              report: pytest.CollectReport | pytest.TestReport) -> None:
    ctx = node.config.stash.get(_context_key, None)
    if isinstance(report, pytest.CollectReport) and call.excinfo is not None and ctx is not None:
        _collect_errors[report.nodeid] = authored.where(call.excinfo.value,
                                                        Path(ctx.assignment_root))


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        place = _collect_errors.get(report.nodeid)
        for recorder in _active_recorders:
            # The place is the author's alone: a student reads that the package is at fault.
            shown = f"{COLLECT_FAILED}: {place}" if place and recorder.ctx.reveal else COLLECT_FAILED
            recorder.add(report.nodeid or "collection", outcome=TestOutcome.ERROR,
                         verdict=Verdict.AUTHOR_ERROR, message=shown, hidden=True, weight=1.0,
                         duration=0.0, held=place and f"{COLLECT_FAILED}: {place}")


_active_recorders: list[Recorder] = []


def pytest_sessionstart(session: pytest.Session) -> None:
    recorder = session.config.stash.get(_recorder_key, None)
    if recorder is not None:
        _active_recorders.append(recorder)


def pytest_sessionfinish(session: pytest.Session) -> None:
    _ZYGOTE.close()
    recorder = session.config.stash.get(_recorder_key, None)
    if recorder is not None:
        recorder.write()
