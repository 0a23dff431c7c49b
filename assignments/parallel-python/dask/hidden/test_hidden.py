"""Hidden tests for the dask assignment: inputs drawn per grading, answers from plain numpy."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

_spec = importlib.util.spec_from_file_location("dask_hook", Path(__file__).with_name("timing.py"))
hook = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hook)
expected_means = hook._expected_means  # the whole-field answer, computed on the trusted side


def means_ok(got: object, field: np.ndarray) -> bool:
    """A float64 array of the right length, every row's mean within 1e-9."""
    want = expected_means(field)
    return (isinstance(got, np.ndarray) and got.dtype == np.float64 and got.shape == want.shape
            and bool(np.allclose(got, want, rtol=1e-9, atol=1e-9)))


def expected_summary(batches: list[np.ndarray]) -> dict:
    """The statistics of all finite values, straight from their concatenation."""
    values = np.concatenate([b[np.isfinite(b)] for b in batches])
    return {"count": int(values.size), "mean": float(values.mean()), "std": float(values.std()),
            "min": float(values.min()), "max": float(values.max())}


def summary_ok(got: object, batches: list[np.ndarray]) -> bool:
    """The same keys, the exact count, and floats within 1e-9."""
    want = expected_summary(batches)
    if not isinstance(got, dict) or set(got) != set(want) or got["count"] != want["count"]:
        return False
    return all(isinstance(got[k], float) and got[k] == pytest.approx(want[k], rel=1e-9, abs=1e-12)
               for k in ("mean", "std", "min", "max"))


def random_batches(rng: np.random.Generator, n: int, max_size: int) -> list[np.ndarray]:
    """Batches of very different sizes and centres, with NaN and ±inf sprinkled in."""
    batches = []
    for _ in range(n):
        size = int(rng.integers(0, max_size))
        b = rng.normal(rng.uniform(-50, 50), rng.uniform(0.5, 5), size)
        bad = rng.random(size) < 0.05
        b[bad] = rng.choice([np.nan, np.inf, -np.inf], int(bad.sum()))
        batches.append(b)
    batches.append(rng.normal(0.0, 1.0, 10))  # at least one finite value overall
    rng.shuffle(batches)
    return batches


def random_field(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Gaussian noise around a random level: neighbours differ by about the filter's scale."""
    return rng.normal(rng.uniform(-3, 3), rng.uniform(0.5, 3), (rows, cols))


# ---------------------------------------------------------------- batch_summary (dask.delayed)


def test_summary_random_batches(submission, rng):
    """Statistics of random batches with NaN, inf, empty and all-NaN batches among them."""
    batches = random_batches(rng, int(rng.integers(8, 20)), 3000)
    assert summary_ok(submission.batch_summary(batches=batches, workers=submission.workers), batches)
    batches = random_batches(rng, 5, 500)
    batches[1:1] = [np.empty(0), np.full(int(rng.integers(1, 50)), np.nan)]
    assert summary_ok(submission.batch_summary(batches=batches, workers=submission.workers), batches)


def test_summary_uneven_batches(submission, rng):
    """Batches of very different sizes: partial results must be weighted by their counts."""
    batches = [rng.normal(rng.uniform(-20, 20), rng.uniform(1, 4), int(size))
               for size in rng.permutation([1, 3, 20_000, 7, 5_000, 2])]
    assert summary_ok(submission.batch_summary(batches=batches, workers=submission.workers), batches)


def test_summary_one_batch_one_worker(submission, rng):
    """A single batch with a single worker."""
    batches = [rng.normal(rng.uniform(-5, 5), 2.0, int(rng.integers(100, 1000)))]
    assert summary_ok(submission.batch_summary(batches=batches, workers=1), batches)


# ---------------------------------------------------------------- filtered_row_means (dask.array)


def test_means_random_shapes(submission, rng):
    """Random fields and block heights, the last block shorter than the others."""
    for _ in range(2):
        chunk_rows = int(rng.integers(2, 40))
        rows = chunk_rows * int(rng.integers(2, 8)) + int(rng.integers(1, chunk_rows))
        field = random_field(rng, rows, int(rng.integers(2, 300)))
        got = submission.filtered_row_means(field=field, chunk_rows=chunk_rows,
                                            workers=submission.workers)
        assert means_ok(got, field)


def test_means_tiny_blocks(submission, rng):
    """Blocks of one to three rows: almost every row touches a block boundary."""
    field = random_field(rng, int(rng.integers(30, 60)), int(rng.integers(5, 40)))
    chunk_rows = int(rng.integers(1, 4))
    got = submission.filtered_row_means(field=field, chunk_rows=chunk_rows,
                                        workers=submission.workers)
    assert means_ok(got, field)


def test_means_odd_shapes(submission, rng):
    """A block taller than the field, a field of two rows and a field of one column."""
    field = random_field(rng, int(rng.integers(5, 50)), int(rng.integers(5, 50)))
    got = submission.filtered_row_means(field=field, chunk_rows=field.shape[0] + 7,
                                        workers=submission.workers)
    assert means_ok(got, field)
    wide = random_field(rng, 2, int(rng.integers(10, 200)))
    assert means_ok(submission.filtered_row_means(field=wide, chunk_rows=1, workers=2), wide)
    tall = random_field(rng, int(rng.integers(10, 200)), 1)
    assert means_ok(submission.filtered_row_means(field=tall, chunk_rows=7, workers=2), tall)


def test_means_one_worker(submission, rng):
    """Still right with a single worker."""
    field = random_field(rng, int(rng.integers(100, 200)), int(rng.integers(50, 150)))
    assert means_ok(submission.filtered_row_means(field=field, chunk_rows=16, workers=1), field)


@pytest.mark.weight(2)
def test_means_large_field(submission, rng):
    """A field of about half a million cells."""
    field = random_field(rng, int(rng.integers(600, 800)), int(rng.integers(600, 800)))
    chunk_rows = int(rng.integers(40, 100))
    got = submission.filtered_row_means(field=field, chunk_rows=chunk_rows,
                                        workers=submission.workers)
    assert means_ok(got, field)
