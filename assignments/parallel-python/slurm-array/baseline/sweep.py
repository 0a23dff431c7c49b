"""The serial baseline of the sweep (run as one task): task `task_id` of `n_tasks` trains its share.

The grader runs `run_task(task_id=i, n_tasks=N, seed=…, grid=…)` for i = 0 … N-1, each task in a
fresh sandbox on one core (an `sbatch --array=0-(N-1)` job on a SLURM runner), at most as many at
a time as there are cores, and gathers the lists they return.
"""

import numpy as np

N_TRAIN, N_VAL, FEATURES = 16_000, 4_000, 48


def make_data(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The sweep's data set (the same in every task: it depends on the seed only)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N_TRAIN + N_VAL, FEATURES))
    w = rng.normal(size=FEATURES) / np.sqrt(FEATURES)
    y = (x @ w + 0.5 * rng.normal(size=N_TRAIN + N_VAL) > 0).astype(np.float64)
    return x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN:], y[N_TRAIN:]


def train(config: dict, data: tuple) -> dict:
    """Logistic regression by full-batch gradient descent (float64): validation accuracy, final
    training loss and the fitted intercept.

    Its cost is proportional to config["epochs"]."""
    x, y, xv, yv = data
    w = np.zeros(x.shape[1])
    b = 0.0
    lr, l2 = config["lr"], config["l2"]
    for _ in range(config["epochs"]):
        p = 1.0 / (1.0 + np.exp(-(x @ w + b)))
        w -= lr * (x.T @ (p - y) / len(y) + l2 * w)
        b -= lr * float(np.mean(p - y))
    p = np.clip(1.0 / (1.0 + np.exp(-(x @ w + b))), 1e-12, 1 - 1e-12)
    loss = float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
    accuracy = float(np.mean(((xv @ w + b) > 0) == (yv > 0.5)))
    return {"accuracy": accuracy, "loss": loss, "bias": float(b)}


def my_configs(task_id: int, n_tasks: int, grid: list[dict]) -> list[int]:
    """The indices into `grid` that task `task_id` of `n_tasks` trains.

    Across the tasks, every index exactly once. The array's time is that of its slowest slot:
    share the work out so that the tasks take about the same time (see the statement)."""
    # The serial baseline: task 0 trains the whole grid in order (timed as a one-task array).
    return list(range(len(grid))) if task_id == 0 else []


def run_task(task_id: int, n_tasks: int, seed: int, grid: list[dict]) -> list[dict]:
    """One array task: {"index", "accuracy", "loss", "bias"} for each configuration it owns."""
    data = make_data(seed)
    return [{"index": i, **train(grid[i], data)} for i in my_configs(task_id, n_tasks, grid)]
