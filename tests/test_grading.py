"""Whole gradings as users meet them: the CLI, the JSON report, verdicts, points, speedup."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from runners import package
from runners.grading import environment, grader, measuring, testrun
from runners.measure import stats, stopping, timed_calls
from runners.nodes import hardware
from runners.protocol import GradeReport, TestOutcome, TestResult, Verdict
from runners.runs import configure
from runners.runs.stage import Stage
from runners.sandbox import create_executor
from runners.settings import REPO_ROOT, get_settings
from tests.conftest import COURSE
from tests.hostcores import on_whole_cores

pytestmark = pytest.mark.slow
PARAGRADE = [sys.executable, "-m", "runners.cli"]
WRONG_T1 = '''
from multiprocessing import Pool

def part(a, b):
    return sum(i * 0.001 for i in range(a, b))

def parallel_sum(n, chunks, workers=2):
    size = n // chunks  # drops the remainder: wrong when chunks does not divide n
    with Pool(workers) as pool:
        return float(sum(pool.starmap(part, [(c * size, (c + 1) * size) for c in range(chunks)])))
'''


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([*PARAGRADE, *args], capture_output=True, text=True, cwd=REPO_ROOT,
                          timeout=600, env=env)


def test_reference_grades_passed_with_json_keys(tmp_path: Path) -> None:
    ref = COURSE / "t1-multiprocessing" / "reference" / "solution.py"

    def graded() -> dict[str, Any]:
        # A reference figure given, the anchor off (the default): the plain ratio, unanchored.
        out = cli("grade", "treasure-hunt/t1-multiprocessing", str(ref), "--json",
                  "--reference-speedup", "1.5", "--profile")
        assert out.returncode == 0, out.stderr
        return cast(dict[str, Any], json.loads(out.stdout))

    # Two workers on two cores; lenient. A stretch of the host's that spans the whole grading goes
    # unseen by its own probes (tests/hostcores.py): graded again once the cores are whole.
    data = on_whole_cores(graded, lambda d: d["speedup"]["median"] > 1.2)
    for key in ("verdict", "tests", "score", "max_score", "speedup", "scaling",
                "serial_fraction", "environment"):
        assert key in data
    assert data["verdict"] == "passed"
    assert all({"name", "outcome", "message"} <= set(t) for t in data["tests"])
    assert data["test_points"] == 60
    sp = data["speedup"]
    assert sp["ci_low"] <= sp["median"] <= sp["ci_high"] and sp["anchor"] is None
    assert sp["median"] > 1.2 or (sp["interference"] or {}).get("unreliable"), sp  # said noisy
    assert [p["workers"] for p in data["scaling"]] == [1, 2]
    assert all(abs(p["efficiency"] - p["speedup"] / p["workers"]) < 1e-3 for p in data["scaling"])
    env = data["environment"]
    assert env["backend"] == "bwrap" and env["sandboxed"] and env["core_set"]
    assert {"python", "numpy", "mpi4py", "torch"} <= set(env["versions"])
    # Platform overhead stays sane: the grading is not dominated by what surrounds timed runs.
    assert data["wall_time_s"] < 120
    # Where the time went: the phases add up to the grading's wall time.
    phases = env["phases"]
    assert {"set-up", "tests", "timing", "timed calls", "report", "profile"} == set(phases)
    # A graded grading profiled after its timing (an assignment that opted in): its two pool
    # workers, and what it cost, a phase of its own.
    prof = data["profile"]
    assert len([w for w in prof["processes"] if w["started_in_call"]]) == 2, prof["processes"]
    assert 0 < prof["cost_s"] == phases["profile"] < data["wall_time_s"] and prof["flame"]
    assert 0 < data["timed_time_s"] == phases["timed calls"] < phases["timing"]
    whole = sum(v for k, v in phases.items() if k != "timed calls")
    assert abs(whole - data["wall_time_s"]) < 0.05
    GradeReport.model_validate(data)


def test_wrong_solution_fails_without_revealing_expected_values(t1: package.Assignment) -> None:
    r = grader.grade(t1, {"solution.py": WRONG_T1.encode()}, seed=12345)
    assert r.verdict is Verdict.FAILED
    assert r.performance_points == 0 and r.speedup is None
    failed = [t for t in r.tests if t.outcome is TestOutcome.FAILED and t.hidden]
    assert failed
    for t in failed:
        assert "wrong answer" in t.message
        assert "assert" not in t.message and "approx" not in t.message
        assert not any(ch.isdigit() for ch in t.message.split(":", 1)[1].replace("1e", ""))
        # The whole message, held apart for the server to show where the test is revealed.
        assert t.held_message is not None and "assert" in t.held_message, t
    public = [t for t in r.tests if not t.hidden and t.outcome is TestOutcome.FAILED]
    assert all("assert" in t.message or "approx" in t.message for t in public)
    assert 0 < r.test_points < 60  # partial credit for the tests whose sizes divide evenly
    # The headline says what went wrong and what to do next, never a bare "verdict failed".
    assert "verdict" not in r.summary, r.summary
    assert "some tests failed" in r.summary and "once every test passes" in r.summary
    assert not public and "public tests failed" not in r.summary  # this one passes them
    r = grader.grade(t1, {"solution.py": (REPO_ROOT / "tests/fixtures/reports/t1_wrong.py")
                          .read_bytes()}, seed=12345)
    public = [t for t in r.tests if not t.hidden and t.outcome is TestOutcome.FAILED]
    assert f"{len(public)} of the public tests failed too: run them on your machine" in r.summary


def test_starter_fails_with_its_todo_message(t1: package.Assignment) -> None:
    r = grader.grade(t1, package.code_of(t1, "starter"))
    assert r.verdict is Verdict.CRASHED
    assert r.score == 0
    assert any("NotImplementedError" in t.message for t in r.tests)


def test_same_seed_same_inputs_different_seed_different_inputs(t1: package.Assignment) -> None:
    probe = ("import json\nseen = []\ndef parallel_sum(n, chunks, workers=2):\n"
             "    print('N', n, chunks)\n    return 0.001 * n * (n - 1) / 2\n")
    outs = [grader.grade(t1, {"solution.py": probe.encode()}, seed=s, with_timing=False)
            for s in (7, 7, 8)]
    lines = [sorted(ln for ln in o.output_excerpt.splitlines() if ln.startswith("N ")) for o in outs]
    assert lines[0] == lines[1] and lines[0] != lines[2]


def test_a_starter_is_judged_on_its_first_failing_test(t1: package.Assignment) -> None:
    """Validation asks only whether the starter fails: its test run stops at the first test that
    does not pass, where a grading runs them all."""
    stage = Stage()
    try:
        code = stage.add_code("starter", package.code_of(t1, "starter"))
        runs = {first: testrun.run_tests(t1, code, backend=get_settings().backend, seed=1,
                                         gpu_mode="none", cpus=[0, 1], hidden_only=True,
                                         first_failure=first)[0]
                for first in (True, False)}
    finally:
        stage.cleanup()
    assert [t.outcome for t in runs[True]] == [TestOutcome.FAILED]
    assert len(runs[False]) > 1 and all(t.outcome is TestOutcome.FAILED for t in runs[False])
    assert runs[True][0].name == runs[False][0].name


def test_validate_cli_reports_each_check() -> None:
    out = cli("assignments", "validate", "assignments/treasure-hunt/t1-multiprocessing")
    assert out.returncode == 0, out.stdout + out.stderr
    for check in ("reference passes", "starter fails", "baseline is correct", "timing hook"):
        assert f"✔ {check}" in out.stdout


def test_validate_names_a_broken_reference(tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "c" / "broken"
    shutil.copytree(COURSE / "t1-multiprocessing", root)
    (root / "reference" / "solution.py").write_text(WRONG_T1)
    out = cli("assignments", "validate", str(root))
    assert out.returncode == 1
    assert "✘ reference passes" in out.stdout and "test_hidden.py::" in out.stdout


CHECKED_IN_A_FIXTURE = '''
import pytest

@pytest.fixture
def total(submission):
    value = submission.parallel_sum(1000, 4)
    assert abs(value - 499.5) < 1e-6, "the sum is off"
    return value

def test_a_sum(total):
    """A sum."""
'''


def test_validate_names_a_starter_failure_blamed_on_the_package(tmp_path: Path) -> None:
    """A hidden test that checks the submission's answer in a fixture reports every student's
    mistake as the package's own (author_error): validation says so (t5 once did it)."""
    import shutil

    from runners.grading import validate

    root = tmp_path / "c" / "fixture-check"
    shutil.copytree(COURSE / "t1-multiprocessing", root)
    (root / "hidden" / "test_hidden.py").write_text(CHECKED_IN_A_FIXTURE)
    (root / "starter" / "solution.py").write_text(
        "def parallel_sum(n, chunks, workers=2):\n    return 0.0\n")

    def starter_check() -> validate.Check:
        checks = {c.name: c for c in validate.validate(root)}
        assert checks["reference passes"].ok, checks["reference passes"].problems
        return checks["starter fails"]

    blamed = starter_check()
    assert not blamed.ok
    assert "reported as author_error" in blamed.problems[0] and "not in a fixture" in blamed.problems[0]
    (root / "hidden" / "test_hidden.py").write_text(CHECKED_IN_A_FIXTURE.replace(
        "    assert abs(value - 499.5) < 1e-6, \"the sum is off\"\n", "").replace(
        '"""A sum."""', '"""A sum."""\n    assert abs(total - 499.5) < 1e-6, "the sum is off"'))
    assert starter_check().ok


def test_validate_does_not_call_a_platform_error_a_passing_starter() -> None:
    """The starter's test run failing as a whole (the platform's fault: the sandbox did not start,
    the test process died) is said as such, not as "the starter passes every hidden test"."""
    from runners.grading import validate

    lost = TestResult(name="grader", outcome=TestOutcome.ERROR, verdict=Verdict.PLATFORM_ERROR,
                      message="the sandbox did not start", hidden=False, weight=0.0, duration_s=0.0)
    check = validate._check_starter([lost])
    assert not check.ok and len(check.problems) == 1, check
    assert "could not run" in check.problems[0] and "the sandbox did not start" in check.problems[0]
    assert "passes every hidden test" not in check.problems[0]


def test_a_script_that_fails_fails_its_tests_as_the_students() -> None:
    """t5's tests that share one training: a script that exits with an error fails them
    (`failed`, the status in the message), not `author_error` ('the test's set-up failed')."""
    t5 = package.load(COURSE / "t5-ddp")
    failing = b"import sys\nprint('no training today')\nsys.exit(3)\n"
    r = grader.grade(t5, {"solution.py": failing}, seed=5, with_timing=False)
    hidden = {t.name.split("::")[1]: t for t in r.tests if t.hidden}
    assert set(hidden) >= {"test_accuracy", "test_identical_weights", "test_one_file_per_rank"}
    for t in hidden.values():
        assert t.verdict is Verdict.FAILED, (t.name, t.verdict, t.message)
        assert "the script exited with status 1 (exit codes: rank 0: 3, rank 1: 3)" in t.message, t.message
        assert "no training today" in t.message, t.message  # the ranks' output, not torchrun's
    assert r.verdict is Verdict.FAILED and r.test_points == 0
    # Run once more after it failed: four tests run the script, each run prints twice (two
    # ranks), 8 prints without the retry; with it 16, of which the 16 KiB excerpt keeps 14.
    assert r.output_excerpt.count("no training today") >= 12


def test_validate_runs_the_warm_up_input_on_both_sides(tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "c" / "cold"
    shutil.copytree(COURSE / "t1-multiprocessing", root)
    hook = root / "hidden" / "timing.py"
    hook.write_text(hook.read_text().replace('"chunks": 16}\n', '"chunks": 0}\n', 2)
                    .replace('"chunks": 0}\n', '"chunks": 16}\n', 1))  # the warm-up's only
    out = cli("assignments", "validate", str(root))
    assert out.returncode == 1
    assert "✘ timing hook" in out.stdout and "a warm-up input failed" in out.stdout, out.stdout
    hook.write_text(hook.read_text() + "\nmake_warmup_input = 5\n")
    out = cli("assignments", "validate", str(root))
    assert out.returncode == 1 and "make_warmup_input is not a function" in out.stdout, out.stdout


def test_a_reference_below_speedup_min_is_measured_once_more(t1: package.Assignment) -> None:
    from runners.grading import validate
    from tests.server.reports import sample_report

    def measured(median: float) -> GradeReport:
        return GradeReport.model_validate(sample_report(median=median, lo=median, hi=median))

    regrades: list[float] = []

    def regrade_to(median: float) -> GradeReport:
        regrades.append(median)
        return measured(median)

    # Above scoring.speedup_min (1.0 for t1) at once: one measurement.
    check = validate._check_speedup(t1, measured(1.8), lambda: regrade_to(1.9), print)
    assert check.ok and check.name == "reference speeds up (1.80× here)" and not regrades
    # A noisy first figure, a good second one: it passes and shows both.
    check = validate._check_speedup(t1, measured(0.92), lambda: regrade_to(1.7), print)
    assert check.ok and "0.92×, then 1.70×" in check.name and regrades == [1.7]
    # Twice at or below: it fails, naming both figures and the scoring curve's floor.
    check = validate._check_speedup(t1, measured(0.9), lambda: regrade_to(1.0), print)
    assert not check.ok and "0.90×, then 1.00× is not above scoring.speedup_min (1.0)" in \
        check.problems[0]


def test_timing_pairs_sandboxes_only_where_a_frozen_side_is_harmless(
        t1: package.Assignment, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = get_settings()
    bwrap, process = create_executor(settings, "bwrap"), create_executor(settings, "process")
    threads_io = package.load(REPO_ROOT / "assignments" / "parallel-python" / "threads-io")
    if os.getuid() == 0:  # root makes cgroups, and these hosts have a freezer
        assert bwrap.can_freeze()
    monkeypatch.setattr(bwrap, "can_freeze", lambda: True)
    assert measuring.can_pair(t1, bwrap, "none")
    assert measuring.can_pair(t1, bwrap, "simulated")
    assert not measuring.can_pair(t1, process, "none")  # same uid: they could meddle
    assert not measuring.can_pair(t1, bwrap, "real")  # queued GPU kernels run on
    assert not measuring.can_pair(threads_io, bwrap, "none")  # one shared service
    monkeypatch.setattr(bwrap, "can_freeze", lambda: False)  # a host without a freezer
    assert not measuring.can_pair(t1, bwrap, "none")


def test_cli_errors_are_messages_not_tracebacks(tmp_path: Path) -> None:
    out = cli("grade", "treasure-hunt/nope", "x.py")
    assert out.returncode == 2 and "no such assignment" in out.stderr
    assert "Traceback" not in out.stderr
    out = cli("grade", "treasure-hunt/t1-multiprocessing", str(tmp_path / "missing.py"))
    assert out.returncode == 2 and "no such file" in out.stderr
    out = cli("assignments", "validate", str(tmp_path / "nowhere"))
    assert out.returncode == 2 and "no such folder" in out.stderr
    out = cli("grade", "treasure-hunt/t1-multiprocessing", "x.py", "--backend", "nonsense")
    assert out.returncode == 2 and "Traceback" not in out.stderr


def test_process_backend_is_labelled_unsafe(t1: package.Assignment) -> None:
    r = grader.grade(t1, package.code_of(t1, "reference"), backend="process", with_timing=False)
    assert r.verdict is Verdict.PASSED
    assert not r.environment.sandboxed
    assert any("UNSAFE" in n for n in r.notes)


def test_list_shows_the_course() -> None:
    out = cli("assignments", "list")
    assert out.returncode == 0
    assert "treasure-hunt/t1-multiprocessing" in out.stdout.replace("\n", "")


@contextlib.contextmanager
def t1_configs(t1: package.Assignment, code: dict[str, bytes],
               baseline: dict[str, bytes] | None = None) -> Iterator[tuple[Any, Any]]:
    """Run configurations (baseline, submission) of t1 at 2 workers on bwrap, for `code` against
    t1's baseline (or `baseline`)."""
    stage = Stage()
    try:
        sub = stage.add_code("submission", code)
        base = stage.add_code("baseline", baseline or package.code_of(t1, "baseline"))
        ex = create_executor(get_settings(), "bwrap")
        cpus, _ = hardware.allotment(t1)

        def cfg(code_dir: Path, serial: bool) -> object:
            return configure.make_config(t1, executor=ex, stage=stage, code_dir=code_dir, cpus=cpus,
                                         workers=2, gpu_mode="none", serial=serial)

        yield cfg(base, True), cfg(sub, False)
    finally:
        stage.cleanup()


def test_empty_submission_measures_under_one_percent_of_the_baseline(
        t1: package.Assignment) -> None:
    """Launch, import and warm-up stay outside the timed region: doing nothing costs ≈ 0."""
    class AcceptAll:
        make_input = staticmethod(measuring.load_hook(t1).make_input)

        @staticmethod
        def check(inputs: dict[str, object], result: object) -> None:
            return None

    empty = {"solution.py": b"def parallel_sum(n, chunks, workers=2):\n    return 0.0\n"}
    with t1_configs(t1, empty) as (base, sub):
        s = timed_calls.measure(hook=AcceptAll, function="parallel_sum", workers=2,  # type: ignore[arg-type]
                           workers_arg="workers", baseline_cfg=base, submission_cfg=sub,
                           rng=np.random.default_rng(1),
                           stop=stopping.StopRule(budget_s=5, min_reps=3, max_reps=6,
                                                  target_width=1.0))
    ratio = float(np.median(s.submission) / np.median(s.baseline))
    assert ratio < 0.01, f"empty submission measured {ratio:.2%} of the baseline"


SLEEPY = b"""
import time

def parallel_sum(n, chunks, workers=2):
    time.sleep(n * 1e-8)  # 50-60 ms for a timed input, nothing for the warm-up's
    return -1.0 if n == 7 and WRONG_WARM_UP else float(n)

WRONG_WARM_UP = %d
"""


@pytest.mark.parametrize("paired", [True, False])
def test_each_sandbox_warms_up_on_the_hooks_warm_up_input(t1: package.Assignment,
                                                          paired: bool) -> None:
    """A hook's make_warmup_input feeds every sandbox's untimed first call, checked like the
    others and never a sample; the timed calls get make_input's inputs."""
    seen: list[int] = []

    class Hook:
        @staticmethod
        def make_input(rng: np.random.Generator, workers: int) -> dict[str, int]:
            return {"n": int(rng.integers(5_000_000, 6_000_000)), "chunks": 4}

        @staticmethod
        def make_warmup_input(rng: np.random.Generator, workers: int) -> dict[str, int]:
            return {"n": 7, "chunks": 4}

        @staticmethod
        def check(inputs: dict[str, int], result: object) -> str | None:
            seen.append(inputs["n"])
            return None if result == float(inputs["n"]) else "the sum is wrong"

    def measure(code: bytes) -> stats.Samples:
        with t1_configs(t1, {"solution.py": code}, {"solution.py": SLEEPY % 0}) as (base, sub):
            return timed_calls.measure(hook=Hook, function="parallel_sum", workers=2,  # type: ignore[arg-type]
                                  workers_arg="workers", baseline_cfg=base, submission_cfg=sub,
                                  rng=np.random.default_rng(2), paired=paired,
                                  stop=stopping.StopRule(budget_s=1, min_reps=3, max_reps=3,
                                                         target_width=1.0))

    s = measure(SLEEPY % 0)
    assert s.paired is paired
    warm, timed = seen.count(7), [n for n in seen if n != 7]
    # One warm-up per side and sandbox: a paired block holds both; one-sided blocks one each.
    assert warm == 2 * (1 if paired else len(s.submission) // timed_calls.CALLS_PER_BLOCK), seen
    assert len(timed) == len(s.baseline) + len(s.submission) and len(s.submission) >= 3
    assert min(s.baseline + s.submission) > 0.045  # no sample is a warm-up call (≈ 0 s)
    seen.clear()
    with pytest.raises(timed_calls.WrongTimedAnswer):  # a wrong warm-up answer is a wrong answer
        measure(SLEEPY % 1)


def test_a_timing_sandbox_is_killed_once_its_last_answer_is_in(
        t1: package.Assignment, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nobody reads a timing sandbox's output after its last call: it is not given the 2 s an
    exiting harness gets, here to run the submission's 30 s atexit handler."""
    import time

    from runners.runs.session import Session

    closes: list[float] = []
    close = Session.close

    def timed_close(self: Session) -> object:
        t = time.monotonic()
        try:
            return close(self)
        finally:
            closes.append(time.monotonic() - t)

    monkeypatch.setattr(Session, "close", timed_close)

    class Hook:
        make_input = staticmethod(measuring.load_hook(t1).make_input)

        @staticmethod
        def make_warmup_input(rng: np.random.Generator, workers: int) -> dict[str, int]:
            return {"n": 7, "chunks": 4}

        @staticmethod
        def check(inputs: dict[str, int], result: object) -> None:
            return None

    lingering = SLEEPY % 0 + b"\nimport atexit\natexit.register(time.sleep, 30)\n"
    with t1_configs(t1, {"solution.py": lingering}) as (base, sub):
        timed_calls.measure(hook=Hook, function="parallel_sum", workers=2,  # type: ignore[arg-type]
                       workers_arg="workers", baseline_cfg=base, submission_cfg=sub,
                       rng=np.random.default_rng(3),
                       stop=stopping.StopRule(budget_s=1, min_reps=3, max_reps=3, target_width=1.0))
    assert len(closes) == 2 and max(closes) < 1.0, closes


def test_the_test_process_gets_no_runner_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARAGRADE_RUNNER_TOKEN", "fleet-token-secret")
    monkeypatch.setenv("PARAGRADE_BROKER_URL", "redis://:pw@broker:6379/0")
    monkeypatch.setenv("PARAGRADE_SERVER_SECRET_KEY", "server-secret")
    monkeypatch.setenv("PARAGRADE_RUNTIME_DIR", "/opt/paragrade/runtime")
    env = testrun._test_env()
    assert not {"PARAGRADE_RUNNER_TOKEN", "PARAGRADE_BROKER_URL",
                "PARAGRADE_SERVER_SECRET_KEY"} & set(env)
    assert env["PARAGRADE_RUNTIME_DIR"] == "/opt/paragrade/runtime"  # settings still reach it


def test_environment_says_how_mpi_moves_device_buffers(tmp_path: Path) -> None:
    """MPI jobs on a GPU report whether the runtime's MPI is CUDA-aware (t4)."""
    settings = get_settings()
    executor = create_executor(settings, "process")
    # The runtime's MPICH from PyPI is built without CUDA (docs/gpu-validation.md).
    assert environment.mpi_gpu_path(settings) == "staged through the host"
    real = environment.environment(executor, [0], "real", settings, False, mpi=True)
    assert real.mpi_gpu_path == "staged through the host"
    assert environment.environment(executor, [0], "none", settings, False, mpi=True).mpi_gpu_path is None
    assert environment.environment(executor, [0], "real", settings, False).mpi_gpu_path is None
    # Test double for a CUDA-aware MPI (none can run here): a runtime whose probe answers yes.
    fake = tmp_path / "runtime"
    (fake / "bin").mkdir(parents=True)
    (fake / "bin" / "python").write_text("#!/bin/sh\necho yes\n")
    (fake / "bin" / "python").chmod(0o755)
    assert environment.mpi_gpu_path(settings.model_copy(update={"runtime_dir": fake})) == "CUDA-aware"
