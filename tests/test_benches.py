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
import subprocess
import sys
from pathlib import Path

import pytest

from runners.settings import REPO_ROOT, get_settings

pytestmark = pytest.mark.slow

TINY: dict[str, tuple[str, ...]] = {
    "array_makespan": ("1",),
    "autoscale_burst": ("4",),
    "backends": ("1",),  # bwrap alone: the other backends only where configured
    "core_speed": ("1",),
    "credit": ("1", "t1-multiprocessing reference"),
    "early_stop": ("1", "t1-multiprocessing reference"),
    "fresh_calls": ("0",),  # the cost alone
    "gpu_probe": (),
    "grading_overhead": ("1",),
    "lti_launches": ("5",),
    "placement": ("1", "treasure-hunt/t1-multiprocessing"),
    "queue_throughput": ("--burst", "4", "--latency-jobs", "2"),
    "runaway": ("treasure-hunt/t1-multiprocessing", "--kinds", "loop"),
    "sandbox_overhead": (),
    "server_throughput": ("--stored", "200", "--students", "20", "--requests", "10",
                          "--seconds", "1", "--quiet", "1"),
    "similarity": ("5",),
    "speedup_repeatability": ("1",),
    "staging": ("1",),
    "timing_interference": ("1", "2", "1", "1"),
}
"""Each bench's smallest run that still goes through every step to its table."""

NEEDS = {"autoscale_burst": pytest.mark.slurm}


def test_every_bench_has_a_tiny_run() -> None:
    benches = {p.stem for p in (REPO_ROOT / "bench").glob("*.py")} - {"__init__", "common"}
    assert benches == set(TINY), "a bench without a tiny run here, or one that is gone"


@pytest.mark.parametrize("name", [pytest.param(n, marks=NEEDS.get(n, ())) for n in TINY])
def test_the_bench_runs_to_its_table(name: str, tmp_path: Path) -> None:
    args = list(TINY[name])
    python = sys.executable
    if name == "gpu_probe":
        python = str(get_settings().runtime_dir / "bin" / "python")
        args.append(str(tmp_path / "gpu_probe.json"))
    r = subprocess.run([python, "-m", f"bench.{name}", *args], cwd=REPO_ROOT,
                       env={**os.environ, "PARAGRADE_BENCH_RESULTS": str(tmp_path)},
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    if name == "gpu_probe":
        rows = json.loads((tmp_path / "gpu_probe.json").read_text())["t3_sizes"]
        assert [row["values"] for row in rows] and all(row["baseline_ms"] > 0 for row in rows)
        return
    tables = sorted(tmp_path.glob("*.json"))  # named by the bench (and its filter, if any)
    assert tables and all(json.loads(t.read_text())["rows"] for t in tables), r.stdout[-2000:]
    assert "|---|" in r.stdout  # the Markdown table the docs copy
