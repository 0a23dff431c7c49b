"""Serial baseline for the joblib sweep (the speedup reference): every fit in one process."""

from functools import cache

import numpy as np
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


def search(seed: int, n_samples: int, C: list[float], gamma: list[float], folds: int = 3,
           noise: float = 0.25, backend: str = "loky", workers: int = 1) -> dict:
    """The whole grid, one fit after another; `backend` and `workers` are accepted and ignored."""
    X, y = make_data(seed, n_samples, noise)
    grid = candidates(C, gamma)
    splits = list(StratifiedKFold(folds, shuffle=True, random_state=seed).split(X, y))
    scores = [[fold_score(X, y, params, train, test) for train, test in splits] for params in grid]
    return summarize(grid, np.asarray(scores, dtype=float))
