"""The trusted checks of timed answers that look at a sample of rows (dask): they accept the
baseline's own answer and refuse an answer wrong where stencils go wrong, or wrong on enough rows
to make a submission look faster."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from runners import grader, package
from runners.settings import REPO_ROOT

DASK = REPO_ROOT / "assignments" / "parallel-python" / "dask"


@pytest.fixture(scope="module")
def dask_hook():  # type: ignore[no-untyped-def]
    return grader.load_hook(package.load(DASK))


@pytest.fixture(scope="module")
def baseline():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("dask_baseline", DASK / "baseline" / "solution.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sampled_check_accepts_the_baselines_answer(dask_hook, baseline) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(7)
    for _ in range(3):
        inputs = dask_hook.make_input(rng, 2)
        assert dask_hook.check(inputs, baseline.filtered_row_means(**inputs)) is None
    # The sampled expectation is the whole-field one, row for row.
    field = inputs["field"]
    rows = dask_hook.checked_rows(*field.shape[:1], inputs["chunk_rows"])
    assert np.allclose(dask_hook._expected_means(field, rows), dask_hook._expected_means(field)[rows],
                       rtol=1e-12, atol=1e-12)


def test_the_sampled_check_refuses_wrong_rows(dask_hook, baseline) -> None:  # type: ignore[no-untyped-def]
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
