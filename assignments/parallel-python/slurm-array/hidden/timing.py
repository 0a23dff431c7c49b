"""Timed inputs for slurm-array (trusted side): a fresh data seed and grid per worker count
(timing.inputs = 1: each is timed in turn), every result recomputed here, once per input, with the
baseline's own training. Also imported by the hidden tests (the gathered check)."""

import importlib.util
import math
from functools import lru_cache
from pathlib import Path

import numpy as np

# The trusted sweep is the instructor's serial baseline (its make_data and train, float64).
_spec = importlib.util.spec_from_file_location(
    "slurm_array_baseline", Path(__file__).resolve().parents[1] / "baseline" / "sweep.py")
assert _spec is not None and _spec.loader is not None
sweep = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sweep)

EPOCHS = (100, 200, 400, 800)  # the grid is epochs-major: contiguous blocks are unequal


@lru_cache(maxsize=8)
def _expected(seed: int, grid: tuple[tuple[float, float, int], ...]) -> list[tuple[float, ...]]:
    data = sweep.make_data(seed)
    trained = [sweep.train({"lr": lr, "l2": l2, "epochs": e}, data) for lr, l2, e in grid]
    return [(t["accuracy"], t["loss"], t["bias"]) for t in trained]  # each configuration once


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
        if not (abs(got[0] - acc) <= 1.5 / sweep.N_VAL and abs(got[1] - loss) <= 1e-9 * abs(loss)
                and abs(got[2] - bias) <= 1e-8 * abs(bias) + 1e-12):
            return f"configuration {r['index']}: wrong accuracy, loss or bias"
    return None


def check(inputs: dict, result: object) -> str | None:
    return gather_problem(inputs, result)
