"""The trusted checks of timed answers that recompute a sample of the answer (dask: rows;
joblib-sweep: candidates): they accept the baseline's own answer, and refuse one wrong where
solutions go wrong or wrong on enough of it to make a submission look faster."""

from __future__ import annotations

import importlib.util
from types import ModuleType

import numpy as np
import pytest

from runners import package
from runners.grading import measuring
from runners.settings import REPO_ROOT

COURSE = REPO_ROOT / "assignments" / "parallel-python"


def hook_and_baseline(slug: str) -> tuple[ModuleType, ModuleType]:
    """The package's timing hook as the grader loads it, and its (trusted) serial baseline."""
    a = package.load(COURSE / slug)
    path = COURSE / slug / "baseline" / a.manifest.entry.file
    spec = importlib.util.spec_from_file_location(f"{slug}_baseline", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return measuring.load_hook(a), module


@pytest.fixture(scope="module")
def dask() -> tuple[ModuleType, ModuleType]:
    return hook_and_baseline("dask")


def test_the_sampled_check_accepts_the_baselines_answer(dask: tuple[ModuleType, ModuleType]
                                                         ) -> None:
    dask_hook, baseline = dask
    rng = np.random.default_rng(7)
    for _ in range(3):
        inputs = dask_hook.make_input(rng, 2)
        assert dask_hook.check(inputs, baseline.filtered_row_means(**inputs)) is None
    # The sampled expectation is the whole-field one, row for row.
    field = inputs["field"]
    rows = dask_hook.checked_rows(*field.shape[:1], inputs["chunk_rows"])
    assert np.allclose(dask_hook._expected_means(field, rows), dask_hook._expected_means(field)[rows],
                       rtol=1e-12, atol=1e-12)


def test_the_sampled_check_refuses_wrong_rows(dask: tuple[ModuleType, ModuleType]) -> None:
    dask_hook, baseline = dask
    rng = np.random.default_rng(8)
    inputs = dask_hook.make_input(rng, 2)
    right = baseline.filtered_row_means(**inputs)
    n, chunk = len(right), inputs["chunk_rows"]
    # Every row next to a block boundary (a halo bug) and at the field's edges, one at a time.
    for row in [0, 1, n - 2, n - 1, *[b + d for b in range(chunk, n, chunk) for d in (-2, -1, 0, 1)]]:
        wrong = right.copy()
        wrong[row] += 1e-6
        assert dask_hook.check(inputs, wrong) == "some rows' means are wrong", row
    # Work skipped to look faster: a block left out, or every third row; and a non-finite mean.
    for wrong in (np.where(np.arange(n) // chunk == 3, 0.0, right),
                  np.where(np.arange(n) % 3 == 0, right + 0.5, right)):
        assert dask_hook.check(inputs, wrong) == "some rows' means are wrong"
    nan = right.copy()
    nan[int(rng.integers(n))] = np.nan
    assert dask_hook.check(inputs, nan) == "some rows' means are not finite"
    assert dask_hook.check(inputs, right[:-1]) is not None
    assert dask_hook.check(inputs, right.tolist()) is not None


def test_the_sweeps_check_recomputes_the_best_and_a_drawn_candidate() -> None:
    hook, baseline = hook_and_baseline("joblib-sweep")
    inputs = hook.make_input(np.random.default_rng(9), 2)
    right = baseline.search(**inputs)
    # Both sides get the same input: the second check fits nothing more than the first.
    assert hook.check(inputs, right) is None
    truth = hook._checked[id(inputs)][1]
    fitted = dict(truth._scores)
    assert 1 <= len(fitted) <= 2 and hook.check(inputs, right) is None and truth._scores == fitted
    shifted = {**right, "mean_scores": [m + 0.01 for m in right["mean_scores"]],
               "best_score": right["best_score"] + 0.01}
    assert hook.check(inputs, shifted) == "a candidate's mean score is wrong"
    others = [g for g in truth.grid if g != right["best_params"]]
    assert hook.check(inputs, {**right, "best_params": others[0]}) == \
        "best_params is not the first candidate with the highest mean score"
    # A fresh input is checked afresh, on a candidate drawn again.
    again = hook.make_input(np.random.default_rng(10), 2)
    assert hook.check(again, baseline.search(**again)) is None
    assert hook._checked[id(again)][1] is not truth


def test_the_arrays_check_trains_each_configuration_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """slurm-array's trusted recomputation costs one serial sweep per input, shared by both
    sides (it once trained every configuration three times: 5 s of the grader's per input)."""
    hook, baseline = hook_and_baseline("slurm-array")
    inputs = hook.make_input(np.random.default_rng(11), 2)
    inputs["grid"] = inputs["grid"][::3]  # one configuration per epoch count: quick
    trained: list[dict[str, float]] = []
    train = hook.sweep.train
    monkeypatch.setattr(hook.sweep, "train", lambda config, data: trained.append(config) or
                        train(config, data))
    right = baseline.run_task(task_id=0, n_tasks=1, **inputs)
    assert hook.check(inputs, [right]) is None and hook.check(inputs, [right]) is None
    assert len(trained) == len(inputs["grid"])
    wrong = [{**right[0], "loss": right[0]["loss"] * 1.001}, *right[1:]]
    assert hook.check(inputs, [wrong]) == "configuration 0: wrong accuracy, loss or bias"
