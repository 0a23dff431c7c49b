"""Public tests for slurm-array: `paragrade test` runs the array as the grader does."""


def test_two_tasks_share_a_small_grid(submission):
    """Two tasks, six configurations: every index once, accuracies between 0 and 1."""
    grid = [{"lr": 0.2, "l2": 0.0, "epochs": e} for e in (3, 3, 5, 5, 8, 8)]
    per_task = submission.array(2, seed=7, grid=grid)
    assert len(per_task) == 2, "one list per task"
    indices = sorted(r["index"] for task in per_task for r in task)
    assert indices == list(range(6)), f"every configuration exactly once, got {indices}"
    assert all(0.0 <= r["accuracy"] <= 1.0 and r["loss"] > 0 and isinstance(r["bias"], float)
               for t in per_task for r in t)


def test_one_task_trains_everything(submission):
    """With n_tasks=1 the only task trains the whole grid."""
    grid = [{"lr": 0.1, "l2": 0.001, "epochs": 2}] * 3
    [only] = submission.array(1, seed=1, grid=grid)
    assert sorted(r["index"] for r in only) == [0, 1, 2]
