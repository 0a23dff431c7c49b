"""Hidden tests for slurm-array: fresh seeds and grids per grading, each array run as the grader
runs it (one sandbox per task), every gathered result recomputed on the trusted side."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("slurm_array_hook",
                                               Path(__file__).with_name("timing.py"))
hook = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hook)


def small_grid(rng, n: int) -> list[dict]:
    """n cheap configurations, their epochs in random order (no sorted grid to rely on)."""
    grid = hook.make_grid(rng, epochs=tuple(int(e) for e in rng.integers(2, 30, n)), per_epochs=1)
    return [grid[i] for i in rng.permutation(n)]


def run(submission, rng, n_configs: int, n_tasks: int) -> None:
    inputs = {"seed": int(rng.integers(0, 2**40)), "grid": small_grid(rng, n_configs)}
    per_task = submission.array(n_tasks, **inputs)
    assert len(per_task) == n_tasks
    problem = hook.gather_problem(inputs, per_task)
    assert problem is None, problem


def test_four_tasks(submission, rng):
    """Four tasks over ten configurations: each trained once, the right numbers."""
    run(submission, rng, 10, 4)


def test_three_tasks(submission, rng):
    """Three tasks over seven configurations (no even split)."""
    run(submission, rng, 7, 3)


def test_more_tasks_than_configurations(submission, rng):
    """Five tasks, three configurations: some tasks have nothing to do and return []."""
    run(submission, rng, 3, 5)


def test_one_task(submission, rng):
    """A single task trains the whole grid."""
    run(submission, rng, 4, 1)
