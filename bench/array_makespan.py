"""Job arrays on local sandboxes: what a task costs to start, and what a partition is worth.

For slurm-array's timed workload (12 configurations, 100–800 epochs, 4 tasks on 2 cores) this
times the serial sweep as one task and the array under three partitions a student might write,
on the same inputs, plus an array of tasks that do nothing (the start-up a task pays).

Usage: .venv/bin/python -m bench.array_makespan [REPEATS] (default 5)
"""

from __future__ import annotations

import statistics
import sys

import numpy as np

from bench.common import publish
from runners import package
from runners.grading import measuring
from runners.nodes import hardware
from runners.runs import array, configure
from runners.runs.stage import Stage
from runners.sandbox import create_executor
from runners.settings import REPO_ROOT, get_settings

SWEEP = REPO_ROOT / "assignments" / "parallel-python" / "slurm-array"
TODO = ("    # TODO: the partition\n"
        "    raise NotImplementedError(\"my_configs: split the grid between the tasks\")")
PARTITIONS = {
    "contiguous blocks": "    k = -(-len(grid) // n_tasks)\n"
                         "    return list(range(task_id * k, min(len(grid), (task_id + 1) * k)))",
    "round robin": "    return list(range(task_id, len(grid), n_tasks))",
}
NOOP = "def run_task(task_id, n_tasks, **inputs):\n    return []\n"


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    a = package.load(SWEEP)
    hook = measuring.load_hook(a)
    settings = get_settings()
    executor = create_executor(settings, None)
    cpus = hardware.host_cpus()[:2]
    starter = package.code_of(a, "starter")["sweep.py"].decode()
    codes = {"serial sweep (baseline, 1 task)": package.code_of(a, "baseline")["sweep.py"].decode()}
    codes |= {name: starter.replace(TODO, body) for name, body in PARTITIONS.items()}
    codes["longest first (reference)"] = package.code_of(a, "reference")["sweep.py"].decode()
    codes["tasks that do nothing"] = NOOP
    stage = Stage(scratch=settings.scratch_dir)
    rows = []
    try:
        cfgs = {name: configure.make_config(
            a, executor=executor, stage=stage, code_dir=stage.add_code(f"c{i}", {
                "sweep.py": code.encode()}), cpus=cpus, workers=2, gpu_mode="none",
            settings=settings) for i, (name, code) in enumerate(codes.items())}
        rng = np.random.default_rng(0)
        times: dict[str, list[float]] = {name: [] for name in codes}
        for _ in range(repeats):
            inputs = hook.make_input(rng, 2)
            for name, cfg in cfgs.items():
                serial = name.startswith("serial")
                got = array.run_local(cfg, "run_task", inputs, n_tasks=1 if serial else 4,
                                      concurrency=1 if serial else 2)
                if name != "tasks that do nothing":
                    assert hook.check(inputs, got.values) is None, name
                times[name].append(got.makespan_s)
        base = statistics.median(times["serial sweep (baseline, 1 task)"])
        for name, ts in times.items():
            rows.append({"code": name, "makespan_s": statistics.median(ts),
                         "speedup": base / statistics.median(ts)})
    finally:
        stage.cleanup()
    print(f"slurm-array, 4 tasks on cores {cpus}, median of {repeats}")
    publish("array_makespan", rows, {"code": "code", "makespan_s": "makespan (s) %.2f",
                                     "speedup": "vs serial %.2f"})


if __name__ == "__main__":
    main()
