"""Job arrays on local sandboxes: values in task order, a failing task stops the others."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from runners import package
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


def config(stage: Stage, code: str) -> RunConfig:
    settings = get_settings()
    return configure.make_config(SWEEP, executor=create_executor(settings, None), stage=stage,
                                 code_dir=stage.add_code("code", {"sweep.py": code.encode()}),
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
