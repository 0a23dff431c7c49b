"""Public tests for the joblib sweep: run them with `python -m pytest -q public_tests`."""

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.svm import SVC

SEED, N, NOISE = 2024, 300, 0.2
C, GAMMA = [1.0, 8.0], [0.01, 0.03]


def grid_search_cv() -> GridSearchCV:
    """The same search done by scikit-learn in one process: what your answer must equal."""
    X, y = load_digits(return_X_y=True)
    rng = np.random.default_rng(SEED)
    rows = rng.choice(len(y), size=N, replace=False)
    X = X[rows] / 16.0 + rng.normal(0.0, NOISE, size=(N, X.shape[1]))
    cv = StratifiedKFold(3, shuffle=True, random_state=SEED)
    return GridSearchCV(SVC(kernel="rbf"), {"C": C, "gamma": GAMMA}, cv=cv, n_jobs=1).fit(X, y[rows])


def test_matches_grid_search_cv(submission):
    """With your default backend: the best parameters and every mean score of GridSearchCV."""
    want = grid_search_cv()
    got = submission.search(seed=SEED, n_samples=N, C=C, gamma=GAMMA, folds=3, noise=NOISE,
                            workers=2)
    assert got["best_params"] == want.best_params_
    assert got["best_score"] == pytest.approx(want.best_score_, abs=1e-9)
    assert got["mean_scores"] == pytest.approx(want.cv_results_["mean_test_score"].tolist(), abs=1e-9)
