"""Dask: a delayed pipeline of batch statistics and a blocked stencil on a dask.array."""

import numpy as np

# TODO: import dask and dask.array as da (you will need both)

# ---------------------------------------------------------------- part 1: dask.delayed


def clean(batch: np.ndarray) -> np.ndarray:
    """The finite values of `batch` (NaN and ±inf dropped)."""
    return batch[np.isfinite(batch)]


def describe(values: np.ndarray) -> dict:
    """Partial statistics of one cleaned batch: count, mean, m2 (sum of squared deviations), min, max."""
    if values.size == 0:
        return {"count": 0, "mean": 0.0, "m2": 0.0, "min": np.inf, "max": -np.inf}
    mean = float(values.mean())
    return {"count": int(values.size), "mean": mean, "m2": float(((values - mean) ** 2).sum()),
            "min": float(values.min()), "max": float(values.max())}


def merge(a: dict, b: dict) -> dict:
    """Partial statistics of two batches together (Chan et al.'s pairwise update)."""
    n = a["count"] + b["count"]
    if n == 0:
        return dict(a)
    delta = b["mean"] - a["mean"]
    return {"count": n, "mean": a["mean"] + delta * b["count"] / n,
            "m2": a["m2"] + b["m2"] + delta * delta * a["count"] * b["count"] / n,
            "min": min(a["min"], b["min"]), "max": max(a["max"], b["max"])}


def finish(total: dict) -> dict:
    """The answer from the statistics of all batches: count, mean, std (population), min, max."""
    return {"count": int(total["count"]), "mean": float(total["mean"]),
            "std": float(np.sqrt(total["m2"] / total["count"])),
            "min": float(total["min"]), "max": float(total["max"])}


def batch_summary(batches: list[np.ndarray], workers: int = 2) -> dict:
    """Summary of the finite values of all `batches`, computed as one dask.delayed task graph."""
    # TODO: wrap clean, describe and merge with dask.delayed (one clean and one describe task per
    # batch, merges combining the partial results), then finish and compute the whole graph once
    # with dask.compute(..., scheduler="threads", num_workers=workers).
    raise NotImplementedError("batch_summary is not written yet")


# ---------------------------------------------------------------- part 2: dask.array (timed)

RADIUS = 2  # the window is (2 * RADIUS + 1) cells wide and high


def filter_rows(block: np.ndarray) -> np.ndarray:
    """Edge-preserving 5×5 mean of every row of `block` except its first and last RADIUS (the halo).

    Each cell becomes Σ w·x / Σ w over its 5×5 window with w = exp(-(x - centre)²); left and right
    edges repeat the edge column. The result has `block.shape[0] - 2 * RADIUS` rows, all columns.
    """
    r = RADIUS
    padded = np.pad(block, ((0, 0), (r, r)), mode="edge")
    rows, cols = block.shape[0] - 2 * r, block.shape[1]
    centre = padded[r:r + rows, r:r + cols]
    num = np.zeros((rows, cols))
    den = np.zeros((rows, cols))
    for di in range(2 * r + 1):
        for dj in range(2 * r + 1):
            nb = padded[di:di + rows, dj:dj + cols]
            # In place: one temporary per neighbour instead of four.
            w = nb - centre
            np.square(w, out=w)
            np.negative(w, out=w)
            np.exp(w, out=w)
            den += w
            w *= nb
            num += w
    num /= den
    return num


def row_means(filtered: np.ndarray) -> np.ndarray:
    """The mean of every row."""
    return filtered.mean(axis=1)


def filtered_row_means(field: np.ndarray, chunk_rows: int, workers: int = 2) -> np.ndarray:
    """Row means of the edge-preserving 5×5 mean of `field`, in blocks of `chunk_rows` rows."""
    # TODO: make `field` a dask array of `chunk_rows`-row blocks (all columns in each), give every
    # block its RADIUS halo rows above and below with map_overlap (the field's own top and bottom
    # rows repeat at its border), apply filter_rows and row_means to each block, and compute with
    # scheduler="threads", num_workers=workers. Return a float64 numpy array of length rows.
    raise NotImplementedError("filtered_row_means is not written yet")
