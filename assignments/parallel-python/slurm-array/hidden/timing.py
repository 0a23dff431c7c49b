"""Timed inputs for slurm-array (trusted side): a fresh data seed and grid per run, every result
recomputed here. Also imported by the hidden tests (the trusted sweep and the gathered check)."""

from functools import lru_cache

import numpy as np

N_TRAIN, N_VAL, FEATURES = 16_000, 4_000, 48
EPOCHS = (100, 200, 400, 800)  # the grid is epochs-major: contiguous blocks are unequal


def make_data(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N_TRAIN + N_VAL, FEATURES))
    w = rng.normal(size=FEATURES) / np.sqrt(FEATURES)
    y = (x @ w + 0.5 * rng.normal(size=N_TRAIN + N_VAL) > 0).astype(np.float64)
    return x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN:], y[N_TRAIN:]


def train(config: dict, data: tuple) -> tuple[float, float]:
    x, y, xv, yv = data
    w = np.zeros(x.shape[1])
    b = 0.0
    for _ in range(config["epochs"]):
        p = 1.0 / (1.0 + np.exp(-(x @ w + b)))
        w -= config["lr"] * (x.T @ (p - y) / len(y) + config["l2"] * w)
        b -= config["lr"] * float(np.mean(p - y))
    p = np.clip(1.0 / (1.0 + np.exp(-(x @ w + b))), 1e-12, 1 - 1e-12)
    loss = float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
    return float(np.mean(((xv @ w + b) > 0) == (yv > 0.5))), loss


@lru_cache(maxsize=8)
def _expected(seed: int, grid: tuple[tuple[float, float, int], ...]) -> list[tuple[float, float]]:
    data = make_data(seed)
    return [train({"lr": lr, "l2": l2, "epochs": e}, data) for lr, l2, e in grid]


def expected(seed: int, grid: list[dict]) -> list[tuple[float, float]]:
    """(accuracy, loss) per configuration, computed on the trusted side (cached per input)."""
    return _expected(seed, tuple((c["lr"], c["l2"], c["epochs"]) for c in grid))


def make_grid(rng: np.random.Generator, epochs: tuple[int, ...] = EPOCHS,
              per_epochs: int = 3) -> list[dict]:
    """Learning rates and penalties drawn per run; `per_epochs` configurations per epoch count."""
    return [{"lr": float(rng.choice([0.05, 0.1, 0.2, 0.4, 0.8])),
             "l2": float(rng.choice([0.0, 1e-4, 1e-3, 1e-2])), "epochs": int(e)}
            for e in epochs for _ in range(per_epochs)]


def make_input(rng: np.random.Generator, workers: int) -> dict:
    return {"seed": int(rng.integers(0, 2**40)), "grid": make_grid(rng)}


def gather_problem(inputs: dict, per_task: object) -> str | None:
    """Why the tasks' gathered lists are not the sweep's results, or None."""
    grid = inputs["grid"]
    if not isinstance(per_task, list) or not all(isinstance(t, list) for t in per_task):
        return "every task must return a list"
    rows = [r for t in per_task for r in t]
    if not all(isinstance(r, dict) and isinstance(r.get("index"), int) for r in rows):
        return "every result must be a dict with an integer 'index'"
    seen = sorted(r["index"] for r in rows)
    if seen != list(range(len(grid))):
        missing = sorted(set(range(len(grid))) - set(seen))
        twice = sorted({i for i in seen if seen.count(i) > 1})
        return (f"every configuration must be trained by exactly one task "
                f"(missing: {missing[:8]}, more than once: {twice[:8]})")
    want = expected(inputs["seed"], grid)
    for r in rows:
        acc, loss = want[r["index"]]
        got_acc, got_loss = r.get("accuracy"), r.get("loss")
        if not isinstance(got_acc, float) or not isinstance(got_loss, float):
            return "accuracy and loss must be floats"
        if abs(got_acc - acc) > 1.5 / N_VAL or not np.isclose(got_loss, loss, rtol=1e-6):
            return f"configuration {r['index']}: wrong accuracy or loss"
    return None


def check(inputs: dict, result: object) -> str | None:
    return gather_problem(inputs, result)
