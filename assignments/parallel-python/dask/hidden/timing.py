"""Timed inputs for the dask assignment (trusted side): drawn per run, every answer checked on
every row next to a block boundary or edge and on rows the checker draws."""

import numpy as np

# Not square, so that a transposed answer cannot pass; 8 equal blocks keep 2 threads evenly busy.
ROWS, COLS = 1152, 1000
CHUNK_ROWS = 144
RADIUS = 2

# Rows checked per timed answer besides those next to a block boundary or the field's edge, where
# a stencil goes wrong: the whole field would cost the grader twice a baseline call per answer. A
# submission that skips work to look faster answers whole blocks wrong (a third of the rows for
# 1.5×), which 96 random rows cannot miss; the hidden tests check every row of smaller fields.
CHECKED_ROWS = 96
# The rows come from the checker's own generator, so the submission cannot know them.
_pick = np.random.default_rng()

# Both sides get the same input dicts, so each field's rows and answers are drawn and computed once
# and looked up by the field's identity (the field is kept alive here, so its id cannot be reused
# meanwhile).
_expected: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


def make_input(rng: np.random.Generator, workers: int, rows: int = ROWS) -> dict:
    """One timed call: a fresh random field, always in blocks of CHUNK_ROWS rows."""
    field = rng.normal(rng.uniform(-3, 3), rng.uniform(0.5, 3), (rows, COLS))
    return {"field": field, "chunk_rows": CHUNK_ROWS}


def make_warmup_input(rng: np.random.Generator, workers: int) -> dict:
    """Each sandbox's untimed first call: two blocks, enough to import dask and start its
    threads without the timed call's eight."""
    return make_input(rng, workers, rows=2 * CHUNK_ROWS)


def _expected_means(field: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """Row means of the edge-preserving 5×5 mean of `field` (edges repeated), for `rows` (every
    row by default), computed from the whole field on the trusted side."""
    rows = np.arange(field.shape[0]) if rows is None else rows
    padded = np.pad(field, RADIUS, mode="edge")
    cols = field.shape[1]
    centre = field[rows]
    num = np.zeros(centre.shape)
    den = np.zeros(centre.shape)
    for di in range(2 * RADIUS + 1):
        band = padded[rows + di]  # each checked row's neighbours di - RADIUS rows away
        for dj in range(2 * RADIUS + 1):
            nb = band[:, dj:dj + cols]
            w = np.exp(-((nb - centre) ** 2))
            num += w * nb
            den += w
    return (num / den).mean(axis=1)


def checked_rows(n: int, chunk_rows: int) -> np.ndarray:
    """Every row whose window crosses a block boundary or the field's edge, and CHECKED_ROWS
    random others."""
    near = [r for b in range(chunk_rows, n, chunk_rows) for r in range(b - RADIUS, b + RADIUS)]
    near += [*range(RADIUS), *range(n - RADIUS, n)]
    return np.union1d(np.clip(near, 0, n - 1), _pick.choice(n, size=min(CHECKED_ROWS, n),
                                                            replace=False))


def check(inputs: dict, result: object) -> str | None:
    """None when `result` is a finite float array of the field's row count whose checked rows
    hold the right means (within 1e-9), else why not."""
    field = inputs["field"]
    key = id(field)
    if key not in _expected or _expected[key][0] is not field:
        if len(_expected) > 8:
            _expected.clear()
        rows = checked_rows(field.shape[0], inputs["chunk_rows"])
        _expected[key] = (field, rows, _expected_means(field, rows))
    _, rows, want = _expected[key]
    if not isinstance(result, np.ndarray) or result.shape != (field.shape[0],):
        return f"expected a numpy array of shape {(field.shape[0],)}"
    if not np.isfinite(result).all():
        return "some rows' means are not finite"
    if not np.allclose(result[rows], want, rtol=1e-9, atol=1e-9):
        return "some rows' means are wrong"
    return None
