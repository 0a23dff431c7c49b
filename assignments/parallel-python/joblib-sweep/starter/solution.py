"""Joblib sweep: cross-validate an SVC grid on noisy digits, in parallel with joblib."""

from functools import cache

import numpy as np
from joblib import Parallel, delayed  # noqa: F401  (you will need them)
from sklearn.datasets import load_digits
from sklearn.model_selection import StratifiedKFold
from sklearn.svm import SVC


@cache
def digits() -> tuple[np.ndarray, np.ndarray]:
    """All 1,797 digits (read once: the same public data for every call)."""
    return load_digits(return_X_y=True)


def make_data(seed: int, n_samples: int, noise: float) -> tuple[np.ndarray, np.ndarray]:
    """The seed's subsample of the digits, scaled to [0, 1], with Gaussian noise added."""
    X, y = digits()
    rng = np.random.default_rng(seed)
    rows = rng.choice(len(y), size=n_samples, replace=False)
    X = X[rows] / 16.0 + rng.normal(0.0, noise, size=(n_samples, X.shape[1]))
    return X, y[rows]


def candidates(C: list[float], gamma: list[float]) -> list[dict[str, float]]:
    """The grid in search order: C outer, gamma inner (GridSearchCV's order)."""
    return [{"C": float(c), "gamma": float(g)} for c in C for g in gamma]


def fold_score(X: np.ndarray, y: np.ndarray, params: dict[str, float],
               train: np.ndarray, test: np.ndarray) -> float:
    """Accuracy of one candidate trained on one fold's training rows."""
    model = SVC(kernel="rbf", **params).fit(X[train], y[train])
    return float(model.score(X[test], y[test]))


def summarize(grid: list[dict[str, float]], scores: np.ndarray) -> dict:
    """Mean accuracy per candidate; the best is the first candidate with the highest mean."""
    means = scores.mean(axis=1)
    best = int(np.argmax(means))
    return {"best_params": grid[best], "best_score": float(means[best]),
            "mean_scores": means.tolist()}


def usable_backend(backend: str, workers: int) -> str:
    """The joblib backend to run on: Ray where it is installed, loky in its place otherwise."""
    # TODO: for "ray", import ray and ray.util.joblib.register_ray, start Ray and register the
    # backend; when `import ray` fails, use "loky" instead. Other names pass through unchanged.
    return backend


def search(seed: int, n_samples: int, C: list[float], gamma: list[float], folds: int = 3,
           noise: float = 0.25, backend: str = "loky", workers: int = 2) -> dict:
    """Cross-validate every (C, gamma) of the grid on the seed's data with `workers` workers."""
    X, y = make_data(seed, n_samples, noise)
    grid = candidates(C, gamma)
    splits = list(StratifiedKFold(folds, shuffle=True, random_state=seed).split(X, y))
    # TODO: run fold_score for every (candidate, fold) pair through
    # joblib.Parallel(n_jobs=workers, backend=usable_backend(backend, workers)), arrange the
    # accuracies as a (len(grid), len(splits)) array and return summarize(grid, scores).
    raise NotImplementedError("search is not written yet")
