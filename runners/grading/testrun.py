"""Running a package's tests: the trusted pytest process (with runners.grading.pytest_plugin), what it
is told (Context), and the verdict its results add up to."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from runners.grading import runaway, testfork
from runners.package import Assignment
from runners.protocol import VERDICT_SEVERITY, TestOutcome, TestResult, Verdict


@dataclass(frozen=True)
class Context:
    """What the grader tells the test process (a JSON file named by --paragrade-context)."""

    assignment_root: str
    code_dir: str
    backend: str
    seed: int
    gpu_mode: str
    results: str
    hidden_dir: str
    cpus: list[int]
    reveal: bool = False
    tests_budget_s: float = float("inf")
    """Seconds the tests may spend before the next one is not started (runners.grading.runaway)."""
    test_limits: dict[str, float] = field(default_factory=dict)
    """Each test's time limit where calibrated (else the package's wall limit)."""
    limit_reasons: dict[str, str] = field(default_factory=dict)
    """Which limit applied to each calibrated test, in words (a timed-out test's message)."""
    serial: bool = False
    """The code runs as the serial baseline is timed: one plain process (runners/runs/configure.py)."""

    @classmethod
    def load(cls, path: str) -> Context:
        return cls(**json.loads(Path(path).read_text()))



PRELOAD = ("pytest", "runners.grading.pytest_plugin")
"""What each test process imports (`pytest -p runners.grading.pytest_plugin`): its fork server's imports."""


def run_tests(assignment: Assignment, code_dir: Path, *, backend: str, seed: int, gpu_mode: str,
              cpus: list[int], reveal: bool = False, public_only: bool = False,
              hidden_only: bool = False, timeout: float | None = None,
              reference_test_s: dict[str, float] | None = None, first_failure: bool = False,
              serial: bool = False) -> tuple[list[TestResult], str]:
    """Run the package's tests (trusted pytest process) against the code in `code_dir`: public
    and hidden, or one kind only; each test's time limit calibrated from `reference_test_s`
    (the reference's seconds per test at validation; runners.grading.runaway). `first_failure`: stop at
    the first test that does not pass (the tests after it are left out of the results).
    `serial`: run the code as the serial baseline is timed (validation's "baseline is correct")."""
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
                          for name, limit in limits.items()}, serial=serial)
        ctx_path = Path(tmp) / "context.json"
        ctx_path.write_text(json.dumps(ctx.__dict__))
        targets = [] if hidden_only else [str(assignment.public_dir)]
        if not public_only:
            targets.append(str(assignment.hidden_dir))
        ini = Path(tmp) / "pytest.ini"  # the package's tests never pick up a project's config
        ini.write_text("[pytest]\npython_files = test_*.py\n")
        argv = ["-c", str(ini), "-p", "runners.grading.pytest_plugin", f"--paragrade-context={ctx_path}",
                "-q", "-p", "no:cacheprovider", "--rootdir", str(assignment.root),
                "--import-mode=importlib", "-W", "ignore::pytest.PytestAssertRewriteWarning",
                *(["--exitfirst"] if first_failure else []), *targets]
        limit = timeout or runaway.process_limit_s(assignment.manifest.resources)
        output = Path(tmp) / "output.txt"
        try:
            ended = testfork.run(testfork.Request(argv=argv, cwd=tmp, env=_test_env(),
                                                  output=str(output)), limit, PRELOAD)
        except OSError as exc:
            return [_platform_test(f"the test process could not start: {exc}")], ""
        if ended.timed_out:
            return [_platform_test("the test run exceeded its time limit")], ""
        if not results.is_file():
            tail = output.read_text(errors="replace")[-3000:] if output.is_file() else ""
            return [_platform_test(f"the test process ended without results: {tail}")], ""
        data = json.loads(results.read_text())
    return [TestResult(**t) for t in data["tests"]], data["output"]


def prepare() -> None:
    """Start this process's test-process fork server now (runners.grading.testfork), so that the first
    grading does not wait for its imports."""
    testfork.start(_test_env(), PRELOAD)


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



def overall_verdict(tests: list[TestResult]) -> Verdict:
    seen = {t.verdict for t in tests}  # a test skipped by its author is "passed"; one not run, not
    for v in VERDICT_SEVERITY:
        if v in seen:
            return v
    return Verdict.PASSED if tests else Verdict.AUTHOR_ERROR



WHAT_WENT_WRONG = {
    Verdict.FAILED: "some tests failed (their messages say how)",
    Verdict.TIMEOUT: "a test ran past its time limit",
    Verdict.MEMORY_EXCEEDED: "a test used more memory than the task allows",
    Verdict.CRASHED: "your code crashed in a test (its message says where)",
    Verdict.OUTPUT_EXCEEDED: "a test printed more output than the task allows",
    Verdict.FORBIDDEN: "your code did something the sandbox forbids (the test's message says what)",
    Verdict.AUTHOR_ERROR: "the task's own tests failed to run: not your code's fault, your "
                          "instructors can see why",
}


def next_step(verdict: Verdict, tests: list[TestResult]) -> str:
    """What a student whose grading stopped at its tests reads after the count: what went wrong
    and what to do next, in plain words (never a bare verdict)."""
    said = WHAT_WENT_WRONG.get(verdict, f"the grading stopped: {verdict.value}")
    if verdict.fault != "student":
        return said
    public = sum(1 for t in tests if not t.hidden and t.outcome in (TestOutcome.FAILED,
                                                                    TestOutcome.ERROR))
    tail = (f"; {public} of the public tests failed too: run them on your machine first (they "
            "are in public_tests/ of the starter download, whose README.txt says how)"
            if public else "")
    return f"{said}; the speedup is measured once every test passes{tail}"
