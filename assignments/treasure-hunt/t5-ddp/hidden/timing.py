"""Timing hook for treasure hunt 5 (trusted): the timed training run and the check of its weights.

A script entry is timed as a whole program: the baseline (one process, `python`) against the
submission under torchrun with 2 ranks, on a training set large enough that the ranks' shared
work outweighs the second interpreter, torch's import and the process group's set-up. Every
timed run's weights are checked as the hidden tests check them.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

SAMPLES = 262144
BATCH = 16384  # global: 8192 per rank with 2 ranks
EPOCHS = 3


def _tests() -> ModuleType:
    """The hidden tests' module: one copy of the data generator, the weights reader and the
    held-out accuracy."""
    path = Path(__file__).with_name("test_hidden.py")
    spec = importlib.util.spec_from_file_location("t5_hidden_tests", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TESTS = _tests()


def make_args(rng: Any, workers: int) -> list[object]:
    seed = int(rng.integers(2**31))
    return ["--seed", seed, "--epochs", EPOCHS, "--samples", SAMPLES, "--batch", BATCH]


def check(argv: list[str], result: Any) -> str | None:
    """None when every rank's weights are those of a trained MLP, the same on every rank."""
    seed = int(argv[argv.index("--seed") + 1])
    if result.returncode != 0:
        return f"the script exited with status {result.returncode}"
    weights = {}
    try:
        for name, blob in result.files.items():
            m = TESTS.NAME_RE.fullmatch(name)
            if m:
                weights[int(m.group(1))] = TESTS.load_weights(name, blob)
    except AssertionError as exc:
        return str(exc)
    if 0 not in weights:
        return "rank 0 wrote no out/weights_rank0.npz"
    acc = TESTS.accuracy(weights[0], seed)
    if acc < TESTS.THRESHOLD:
        return f"held-out accuracy {acc:.3f} is below {TESTS.THRESHOLD}"
    for rank, w in sorted(weights.items()):
        if any(not TESTS.np.allclose(w[k], weights[0][k], rtol=0.0, atol=1e-5) for k in w):
            return f"rank {rank}'s weights differ from rank 0's"
    return None
