"""Job arrays on local sandboxes: values in task order, a failing task stops the others, no run
finds what an earlier one left, and the timed inputs are drawn as the package says."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from runners import package
from runners.measure import whole_runs
from runners.measure.stopping import StopRule
from runners.nodes import hardware
from runners.runs import array, configure
from runners.runs.failures import SubmissionRaised
from runners.runs.runconfig import RunConfig
from runners.runs.stage import Stage
from runners.sandbox import create_executor
from runners.settings import REPO_ROOT, get_settings

SWEEP = package.load(REPO_ROOT / "assignments" / "parallel-python" / "slurm-array")


@pytest.fixture
def stage() -> Iterator[Stage]:
    s = Stage()
    yield s
    s.cleanup()


def config(stage: Stage, code: str, name: str = "code") -> RunConfig:
    settings = get_settings()
    return configure.make_config(SWEEP, executor=create_executor(settings, None), stage=stage,
                                 code_dir=stage.add_code(name, {"sweep.py": code.encode()}),
                                 cpus=hardware.host_cpus(), workers=2, gpu_mode="none",
                                 settings=settings)


def test_each_task_runs_once_in_its_own_sandbox_and_values_come_back_in_id_order(
        stage: Stage) -> None:
    code = ("import os\n"
            "def run_task(task_id, n_tasks, tag):\n"
            "    return [task_id, n_tasks, tag, os.getpid(), len(os.sched_getaffinity(0))]\n")
    got = array.run_local(config(stage, code), "run_task", {"tag": "x"}, n_tasks=5,
                          concurrency=2)
    assert [v[:3] for v in got.values] == [[i, 5, "x"] for i in range(5)]
    assert all(v[4] == 1 for v in got.values)  # one core per task
    assert got.makespan_s > 0


def test_a_failing_task_stops_the_array_and_its_error_is_raised(stage: Stage) -> None:
    code = ("import time\n"
            "def run_task(task_id, n_tasks):\n"
            "    if task_id == 1:\n"
            "        time.sleep(50)\n"
            "    if task_id == 2:\n"
            "        raise ValueError('task two is broken')\n"
            "    return task_id\n")
    t0 = time.monotonic()
    with pytest.raises(SubmissionRaised, match="task two is broken"):
        array.run_local(config(stage, code), "run_task", {}, n_tasks=4, concurrency=2)
    assert time.monotonic() - t0 < 30  # task 1's sandbox was stopped, not waited for


CANARY = """import os, tempfile


def run_task(task_id, n_tasks, seed):
    # What any earlier run of the same input left, wherever a task can write; then its own.
    places = {os.getcwd(), tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm",
              os.environ.get("HOME") or "/", os.path.dirname(os.path.abspath(__file__))}
    name = f"paragrade-canary-{seed}"
    found = sorted(d for d in places if os.path.exists(os.path.join(d, name)))
    for d in places:
        try:
            with open(os.path.join(d, name), "w") as f:
                f.write(str(task_id))
        except OSError:
            pass
    return found
"""


def test_a_run_finds_nothing_an_earlier_run_of_the_same_input_left(stage: Stage) -> None:
    """timing.inputs times one input again and again: a run that could read what an earlier
    one wrote could hand back its results at once. Every task starts in a fresh sandbox."""
    cfg = config(stage, CANARY)
    for _ in range(3):
        got = array.run_local(cfg, "run_task", {"seed": 7}, n_tasks=4, concurrency=2)
        assert got.values == [[]] * 4, got.values


def _timed(stage: Stage, distinct: int | None) -> tuple[int, list[int]]:
    """Three blocks of the array timed with `distinct` inputs: how many the hook drew, and
    the seed each of the six runs got (its tasks return it)."""
    code = "def run_task(task_id, n_tasks, seed):\n    return seed\n"
    draws, seen = [], []

    def make_input(rng: np.random.Generator, workers: int) -> dict[str, Any]:
        draws.append(int(rng.integers(0, 2**31)))
        return {"seed": draws[-1]}

    def check(inputs: dict[str, Any], values: list[int]) -> str | None:
        seen.append(values[0])
        return None if values == [inputs["seed"]] * 4 else "wrong seed"

    runner = array.array_runner(SWEEP, config(stage, code, f"inputs-{distinct}"), 4, 2,
                                get_settings())
    whole_runs.measure_array(hook=SimpleNamespace(make_input=make_input, check=check),  # type: ignore[arg-type]
                             workers=2, baseline=runner, submission=runner,
                             rng=np.random.default_rng(1), distinct=distinct,
                             stop=StopRule(budget_s=0, min_reps=3, max_reps=3, target_width=1))
    return len(draws), seen


def test_the_timed_inputs_are_drawn_as_the_package_says(stage: Stage) -> None:
    draws, seen = _timed(stage, None)  # a fresh input each block, both sides on it
    assert draws == 3 and seen[0::2] == seen[1::2] and len(set(seen)) == 3, seen
    draws, seen = _timed(stage, 1)  # timing.inputs = 1: one input, timed in turn
    assert draws == 1 and len(seen) == 6 and len(set(seen)) == 1, seen
    draws, seen = _timed(stage, 2)
    assert draws == 2 and seen[0::2] == seen[1::2] and seen[0::2][0] == seen[0::2][2] != seen[2]
