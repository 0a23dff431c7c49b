"""Timed inputs for the joblib sweep (trusted side), and the checker the hidden tests share.

Every input draws a fresh seed (subsample, noise, fold split) and a fresh grid, so no answer can
be cached or read off the public digits. The checker recomputes, with scikit-learn on this side,
the candidates' cross-validated accuracies: all of them in the hidden tests, and for each timed
answer the claimed best plus one candidate the submission cannot predict.
"""

from functools import cache

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import StratifiedKFold
from sklearn.svm import SVC

C_POOL = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
GAMMA_POOL = (0.005, 0.01, 0.02, 0.03, 0.05, 0.08)
TOL = 1e-9  # fold accuracies are k/n: means that differ at all differ by far more


def draw(rng: np.random.Generator, *, n_samples: tuple[int, int], n_c: int, n_gamma: int,
         folds: int = 3) -> dict:
    """A fresh input: a seed, a subsample size, a noise level and a random sub-grid."""
    return {
        "seed": int(rng.integers(0, 2**31)),
        "n_samples": int(rng.integers(*n_samples)),
        "C": sorted(float(c) for c in rng.choice(C_POOL, size=n_c, replace=False)),
        "gamma": sorted(float(g) for g in rng.choice(GAMMA_POOL, size=n_gamma, replace=False)),
        "folds": folds,
        "noise": round(float(rng.uniform(0.2, 0.3)), 3),
    }


def make_input(rng: np.random.Generator, workers: int) -> dict:
    # 6 candidates x 3 folds = 18 fits, ~0.35 s serially. Fits on ~450 rows keep libsvm's share
    # (which runs without the GIL) high against sklearn's per-fit Python overhead (~2 ms).
    return draw(rng, n_samples=(540, 620), n_c=3, n_gamma=2)


def make_warmup_input(rng: np.random.Generator, workers: int) -> dict:
    """Each sandbox's untimed first call: 2 candidates x 3 folds of fewer rows, enough to start
    the pool's workers (each imports scikit-learn) without a whole search."""
    return draw(rng, n_samples=(200, 260), n_c=1, n_gamma=2)


@cache
def _digits() -> tuple[np.ndarray, np.ndarray]:
    return load_digits(return_X_y=True)


class Truth:
    """The search's data, folds and grid for one input, recomputed on the trusted side."""

    def __init__(self, inputs: dict) -> None:
        X, y = _digits()
        n, seed = inputs["n_samples"], inputs["seed"]
        rng = np.random.default_rng(seed)
        rows = rng.choice(len(y), size=n, replace=False)
        self.X = X[rows] / 16.0 + rng.normal(0.0, inputs["noise"], size=(n, X.shape[1]))
        self.y = y[rows]
        cv = StratifiedKFold(inputs["folds"], shuffle=True, random_state=seed)
        self.splits = list(cv.split(self.X, self.y))
        self.grid = [{"C": float(c), "gamma": float(g)} for c in inputs["C"]
                     for g in inputs["gamma"]]
        self._scores: dict[int, float] = {}

    def score(self, index: int) -> float:
        """Mean accuracy over the folds of candidate `index` (fitted once per Truth)."""
        if index not in self._scores:
            params = self.grid[index]
            accs = [SVC(kernel="rbf", **params).fit(self.X[tr], self.y[tr]).score(self.X[te],
                                                                                 self.y[te])
                    for tr, te in self.splits]
            self._scores[index] = float(np.mean(accs))
        return self._scores[index]


def _number(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        return None
    return float(x)


def verify(inputs: dict, result: object, indices: list[int] | None = None,
           truth: Truth | None = None) -> str | None:
    """None when `result` is right for `inputs`; recompute `indices` (None: every candidate)."""
    truth = truth or Truth(inputs)
    n = len(truth.grid)
    if not isinstance(result, dict):
        return "the result is not a dict"
    missing = {"best_params", "best_score", "mean_scores"} - set(result)
    if missing:
        return f"the result has no {', '.join(sorted(missing))}"
    raw = result["mean_scores"]
    if isinstance(raw, np.ndarray):
        raw = raw.tolist()
    if not isinstance(raw, (list, tuple)) or len(raw) != n:
        return f"mean_scores must list one score per candidate ({n})"
    means = [_number(m) for m in raw]
    if any(m is None or not np.isfinite(m) for m in means):
        return "mean_scores must be finite numbers"
    # Exact comparison, as numpy.argmax and GridSearchCV do: means that are equal in exact
    # arithmetic can differ in the last bit (fold order in the sum), and then the larger wins.
    top = max(means)
    first_best = means.index(top)
    params = result["best_params"]
    if not isinstance(params, dict) or set(params) != {"C", "gamma"}:
        return "best_params must be a dict with the keys 'C' and 'gamma'"
    if params != truth.grid[first_best]:
        return "best_params is not the first candidate with the highest mean score"
    best_score = _number(result["best_score"])
    if best_score is None or abs(best_score - top) > TOL:
        return "best_score is not the highest mean score"
    for i in sorted(set(range(n) if indices is None else indices)):
        if abs(truth.score(i) - means[i]) > TOL:
            return "a candidate's mean score is wrong"
    return None


# Both sides get the same input dict: its truth (data, folds, the scores recomputed so far) and the
# candidate drawn to check are made once per input and looked up by the dict's identity (the dict
# is kept alive here, so its id cannot be reused meanwhile).
_checked: dict[int, tuple[dict, Truth, int]] = {}
# The checker's own generator: the submission cannot know which candidate is recomputed.
_pick = np.random.default_rng()


def check(inputs: dict, result: object) -> str | None:
    # The claimed best and one candidate drawn here (unpredictable) keep the check ~5x cheaper
    # than the search; the hidden tests recompute the whole grid.
    key = id(inputs)
    if key not in _checked or _checked[key][0] is not inputs:
        if len(_checked) > 8:
            _checked.clear()
        truth = Truth(inputs)
        _checked[key] = (inputs, truth, int(_pick.integers(len(truth.grid))))
    _, truth, drawn = _checked[key]
    best = 0
    if isinstance(result, dict) and isinstance(result.get("best_params"), dict):
        params = result["best_params"]
        best = truth.grid.index(params) if params in truth.grid else 0
    return verify(inputs, result, [best, drawn], truth=truth)
