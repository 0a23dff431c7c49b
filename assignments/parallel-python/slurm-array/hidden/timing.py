"""Timed inputs for slurm-array (trusted side): a fresh data seed and grid per run, every result
recomputed here. Also imported by the hidden tests (the trusted sweep and the gathered check)."""

import math
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


def train(config: dict, data: tuple) -> tuple[float, float, float]:
    x, y, xv, yv = data
    w = np.zeros(x.shape[1])
    b = 0.0
    for _ in range(config["epochs"]):
        p = 1.0 / (1.0 + np.exp(-(x @ w + b)))
        w -= config["lr"] * (x.T @ (p - y) / len(y) + config["l2"] * w)
        b -= config["lr"] * float(np.mean(p - y))
    p = np.clip(1.0 / (1.0 + np.exp(-(x @ w + b))), 1e-12, 1 - 1e-12)
    loss = float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
    return float(np.mean(((xv @ w + b) > 0) == (yv > 0.5))), loss, float(b)


@lru_cache(maxsize=8)
def _expected(seed: int, grid: tuple[tuple[float, float, int], ...]) -> list[tuple[float, ...]]:
    data = make_data(seed)
    return [train({"lr": lr, "l2": l2, "epochs": e}, data) for lr, l2, e in grid]


def expected(seed: int, grid: list[dict]) -> list[tuple[float, ...]]:
    """(accuracy, loss, bias) per configuration, computed on the trusted side (cached per input)."""
    return _expected(seed, tuple((c["lr"], c["l2"], c["epochs"]) for c in grid))


def make_grid(rng: np.random.Generator, epochs: tuple[int, ...] = EPOCHS,
              per_epochs: int = 3) -> list[dict]:
    """`per_epochs` configurations per epoch count, learning rate and penalty drawn from
    continuous ranges: no two share a descent path (no run can serve as another's prefix)."""
    return [{"lr": float(rng.uniform(0.05, 0.8)), "l2": float(10 ** rng.uniform(-4, -2)),
             "epochs": int(e)} for e in epochs for _ in range(per_epochs)]


def make_input(rng: np.random.Generator, workers: int) -> dict:
    return {"seed": int(rng.integers(0, 2**40)), "grid": make_grid(rng)}


def gather_problem(inputs: dict, per_task: object) -> str | None:
    """Why the tasks' gathered lists are not the sweep's results, or None."""
    grid = inputs["grid"]
    if not isinstance(per_task, list) or not all(isinstance(t, list) for t in per_task):
        return "every task must return a list"
    rows = [r for t in per_task for r in t]
    if not all(isinstance(r, dict) and type(r.get("index")) is int for r in rows):
        return "every result must be a dict with an integer 'index'"
    seen = sorted(r["index"] for r in rows)
    if seen != list(range(len(grid))):
        missing = sorted(set(range(len(grid))) - set(seen))
        twice = sorted({i for i in seen if seen.count(i) > 1})
        return (f"every configuration must be trained by exactly one task "
                f"(missing: {missing[:8]}, more than once: {twice[:8]})")
    want = expected(inputs["seed"], grid)
    for r in rows:
        got = [r.get(k) for k in ("accuracy", "loss", "bias")]
        if not all(type(v) is float and math.isfinite(v) for v in got):
            return "accuracy, loss and bias must be finite floats"
        acc, loss, bias = want[r["index"]]
        # float64 in another summation order agrees to ~1e-12; float32 training does not.
        if not (abs(got[0] - acc) <= 1.5 / N_VAL and abs(got[1] - loss) <= 1e-9 * abs(loss)
                and abs(got[2] - bias) <= 1e-8 * abs(bias) + 1e-12):
            return f"configuration {r['index']}: wrong accuracy, loss or bias"
    return None


def check(inputs: dict, result: object) -> str | None:
    return gather_problem(inputs, result)
