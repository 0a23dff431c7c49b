"""Public tests for treasure hunt 5: run them with `python -m pytest -q public_tests`."""

from __future__ import annotations

import io

import numpy as np

KEYS = {"fc1.weight": (64, 6), "fc1.bias": (64,), "fc2.weight": (4, 64), "fc2.bias": (4,)}


def test_writes_weights_of_every_rank(submission):
    """Two epochs: each rank writes out/weights_rank{rank}.npz with the four arrays."""
    result = submission.run("--seed", "7", "--epochs", "2")
    if result.returncode != 0:  # once more, as the hidden tests do: gloo now and then aborts at exit
        result = submission.run("--seed", "7", "--epochs", "2")
    assert result.returncode == 0, f"the script failed:\n{result.output[-3000:]}"
    names = sorted(n for n in result.files if n.startswith("weights_rank"))
    assert names == [f"weights_rank{r}.npz" for r in range(submission.workers)], names
    for name in names:
        with np.load(io.BytesIO(result.files[name]), allow_pickle=False) as npz:
            assert sorted(npz.files) == sorted(KEYS), f"{name}: {npz.files}"
            for key, shape in KEYS.items():
                assert npz[key].shape == shape, f"{name}: {key} {npz[key].shape}"
