"""Timed inputs for the dask assignment (trusted side): drawn per run, every answer checked."""

import numpy as np

# Not square, so that a transposed answer cannot pass; 8 equal blocks keep 2 threads evenly busy.
ROWS, COLS = 1152, 1000
CHUNK_ROWS = 144
RADIUS = 2

# Both sides get the same input dicts, so each expected answer is computed once and looked up by
# the field's identity (the field is kept alive here, so its id cannot be reused meanwhile).
_expected: dict[int, tuple[np.ndarray, np.ndarray]] = {}


def make_input(rng: np.random.Generator, workers: int) -> dict:
    """One timed call: a fresh random field, always in blocks of CHUNK_ROWS rows."""
    field = rng.normal(rng.uniform(-3, 3), rng.uniform(0.5, 3), (ROWS, COLS))
    return {"field": field, "chunk_rows": CHUNK_ROWS}


def _expected_means(field: np.ndarray) -> np.ndarray:
    """Row means of the edge-preserving 5×5 mean of `field`, computed on the whole field at once."""
    padded = np.pad(field, RADIUS, mode="edge")
    rows, cols = field.shape
    num = np.zeros(field.shape)
    den = np.zeros(field.shape)
    for di in range(2 * RADIUS + 1):
        for dj in range(2 * RADIUS + 1):
            nb = padded[di:di + rows, dj:dj + cols]
            w = np.exp(-((nb - field) ** 2))
            num += w * nb
            den += w
    return (num / den).mean(axis=1)


def check(inputs: dict, result: object) -> str | None:
    """None when `result` holds the right row means for `inputs`, else why not."""
    field = inputs["field"]
    key = id(field)
    if key not in _expected or _expected[key][0] is not field:
        if len(_expected) > 8:
            _expected.clear()
        _expected[key] = (field, _expected_means(field))
    want = _expected[key][1]
    if not isinstance(result, np.ndarray) or result.shape != want.shape:
        return f"expected a numpy array of shape {want.shape}"
    if not np.allclose(result, want, rtol=1e-9, atol=1e-9):
        return "some rows' means are wrong"
    return None
