"""Every benchmark runs once with tiny parameters, so that the command behind each table in
docs/contributors/benchmarks.md keeps working as the code under it changes (one had stopped at
its first line for days, found only when someone wanted its figure).

Only that it runs to its table is checked: tiny runs beside nothing in particular measure
nothing worth a bound. Their JSON goes to a folder of the test's own (PARAGRADE_BENCH_RESULTS),
so a recorded figure is never replaced by a tiny one. Each bench runs where its benchmark says it
must: the GPU probe with the sandbox's runtime Python (numba; "the CPU rows only" here), the burst
of pilots on the suite's two-node SLURM cluster.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from runners.settings import REPO_ROOT, get_settings
from tests.server.live import wait_until

pytestmark = pytest.mark.slow

TINY: dict[str, tuple[str, ...]] = {
    "array_makespan": ("1",),
    # The scaled run alone: the fixed fleet has no step of its own, and the faults' drain and
    # cancel are tests/test_autoscale.py's (a 2-minute allocation each: past 10 min in a slow CI).
    # Its pilots leave after 5 s idle (the least a fleet file takes), not 10: the run waits for
    # the fleet at rest twice (55 -> 41 s here).
    "autoscale_burst": ("4", "--modes", "scaled", "--idle-exit", "5"),
    "backup": ("20", "5"),
    # bwrap alone (the other backends only where configured), on t1 alone
    "backends": ("1", "treasure-hunt/t1-multiprocessing"),
    "busy_node": ("1", "quiet"),
    "core_speed": ("1",),
    "credit": ("1", "t1-multiprocessing reference"),
    "early_stop": ("1", "t1-multiprocessing reference"),
    "fresh_calls": ("0",),  # the cost alone
    "gpu_probe": (),
    "final_run": ("--per-variant", "1", "--shares", "50", "--rounds", "1", "--runs", "1"),
    "grading_overhead": ("1",),
    "lti_launches": ("5",),
    "placement": ("1", "treasure-hunt/t1-multiprocessing"),
    "practice": ("1", "--packages", "treasure-hunt/t1-multiprocessing", "--queued", "3"),
    "queue_throughput": ("--burst", "4", "--latency-jobs", "2"),
    # Read every 0.5 s, not 2: t1's check takes 2 s, and the reads' waits were most of the run.
    "readiness": ("--packages", "treasure-hunt/t1-multiprocessing", "--next-term", "--every",
                  "0.5"),
    "runaway": ("treasure-hunt/t1-multiprocessing", "--kinds", "loop"),
    "sandbox_overhead": (),
    "server_throughput": ("--stored", "200", "--students", "20", "--requests", "10",
                          "--seconds", "1", "--quiet", "1"),
    "similarity": ("5",),
    "speedup_repeatability": ("1", "--anchor", "--reference-speedup", "1.5"),
    "staging": ("1", "256 MiB"),  # file, frames and the frames' refusal; 1 GiB took 21 s
    "timing_interference": ("1", "2", "1", "1"),
}
"""Each bench's smallest run that still goes through every step to its table."""

TINY_ENV = {"lti_launches": {"PARAGRADE_SERVER_OUTBOUND_BUDGET_S": "2"},
            "placement": {"PARAGRADE_TIMING_PROBE": "false"}}
"""Settings of a tiny run: the launches wait out the server's budget for a key set (10 s); the
placement's gradings beside their tenant would time every window the probe finds short again
(30 -> 24 s; the probe's own steps are tests/test_capacity.py's and tests/test_busy_node.py's)."""
NEEDS = {"autoscale_burst": pytest.mark.slurm}
TINY_BUDGET_S = 2.0


def test_every_bench_has_a_tiny_run() -> None:
    benches = {p.stem for p in (REPO_ROOT / "bench").glob("*.py")} - {"__init__", "common"}
    assert benches == set(TINY), "a bench without a tiny run here, or one that is gone"


def _run_to_the_end(cmd: list[str], env: dict[str, str], timeout: float = 600
                    ) -> subprocess.CompletedProcess[str]:
    """Run a bench; past `timeout`, interrupt it (SIGINT: its `finally` blocks stop what it
    started: clusters, scalers, pilots) and give it two minutes before its group is killed."""
    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        pytest.fail(f"{cmd[2]} ran past {timeout:.0f} s and was interrupted:\n"
                    f"{(out + err)[-3000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.mark.parametrize("name", [pytest.param(n, marks=NEEDS.get(n, ())) for n in TINY])
def test_the_bench_runs_to_its_table(name: str, tmp_path: Path) -> None:
    args = list(TINY[name])
    python = sys.executable
    if name == "gpu_probe":
        python = str(get_settings().runtime_dir / "bin" / "python")
        args.append(str(tmp_path / "gpu_probe.json"))
    # A short timing budget for every grading: a tiny run's figures are not read, its steps are
    # (the budget was most of the benches' 10 minutes in CI, busy gradings re-timed to twice it).
    r = _run_to_the_end([python, "-m", f"bench.{name}", *args],
                        env={**os.environ, "PARAGRADE_BENCH_RESULTS": str(tmp_path),
                             "PARAGRADE_TIMING_BUDGET_S": str(TINY_BUDGET_S),
                             **TINY_ENV.get(name, {})})
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    if name == "gpu_probe":
        rows = json.loads((tmp_path / "gpu_probe.json").read_text())["t3_sizes"]
        assert [row["values"] for row in rows] and all(row["baseline_ms"] > 0 for row in rows)
        return
    tables = sorted(tmp_path.glob("*.json"))  # named by the bench (and its filter, if any)
    assert tables and all(json.loads(t.read_text())["rows"] for t in tables), r.stdout[-2000:]
    assert "|---|" in r.stdout  # the Markdown table the docs copy


def _mentioning(text: str) -> list[str]:
    """The processes whose command line or environment names `text`."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            seen = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
        except OSError:
            continue  # gone, or not ours to read
        if text.encode() in seen:
            found.append(f"{proc.name}: {(proc / 'cmdline').read_bytes()[:200]!r}")
    return found


def _run_cgroups() -> set[Path]:
    return set(Path("/sys/fs/cgroup").rglob("paragrade-*"))


def _empty(cgroups: set[Path]) -> set[Path]:
    """Those of `cgroups` that hold no process (a live sandbox of other work holds some)."""
    empty = set()
    for d in cgroups:
        try:
            if not (d / "cgroup.procs").read_text().strip():
                empty.add(d)
        except OSError:
            continue  # removed meanwhile
    return empty


@pytest.mark.slurm
def test_an_interrupted_burst_leaves_nothing_running(tmp_path: Path) -> None:
    """The burst bench stopped mid-burst (SIGINT, as the suite stops one past its time): its
    SLURM cluster, scaler, pilots and their sandboxes all end, and its folder goes."""
    before = set(Path(tempfile.gettempdir()).glob("paragrade-burst-*"))
    cgroups = _run_cgroups()
    # 60 submissions: a burst long enough that the interrupt finds it under way. (The bench
    # runs on SIGINT even when the suite was started with SIGINT ignored: bench/__init__.py.)
    proc = subprocess.Popen([sys.executable, "-m", "bench.autoscale_burst", "60", "--modes",
                             "scaled"], cwd=REPO_ROOT, start_new_session=True,
                            env={**os.environ, "PARAGRADE_BENCH_RESULTS": str(tmp_path)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        def pilots_running() -> Path | None:
            made = set(Path(tempfile.gettempdir()).glob("paragrade-burst-*")) - before
            if made and any("slurmstepd" in p for p in _mentioning(str(next(iter(made))))):
                return next(iter(made))
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            return None

        shared = wait_until("the bench's pilots to run", pilots_running, 300, 1.0)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0, out[-2000:]  # interrupted, not finished
    left = _mentioning(str(shared))
    assert not left, left
    assert not shared.exists()
    # A run cgroup the bench's pilots left: empty, and still there a while later (a sandbox of
    # other work on this host is not empty, and goes).
    empty = _empty(_run_cgroups() - cgroups)
    time.sleep(3)
    assert not _empty(empty), _empty(empty)
