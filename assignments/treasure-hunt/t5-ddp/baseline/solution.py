"""Serial baseline for treasure hunt 5: the same MLP trained by one process on all the data.

`python solution.py --seed S --epochs E [--samples N --batch B]` writes out/weights_rank0.npz
(B: the batch the DDP solution shares among its ranks). Launched by torchrun, every process
trains the whole data set alone, deterministically and from the same seed, and writes
out/weights_rank{RANK}.npz: the files are identical (nothing is shared between them).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

FEATURES, CLASSES, CLUSTERS = 6, 4, 4
HIDDEN = 64
LR, MOMENTUM = 0.1, 0.9
CENTRES_SEED = 20261122


def make_data(seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n labelled points: 4 classes, each a mixture of 4 Gaussian clusters in 6-D."""
    centres = np.random.default_rng(CENTRES_SEED).normal(0.0, 1.0, (CLASSES * CLUSTERS, FEATURES))
    centres *= 1.5
    rng = np.random.default_rng(seed)
    cluster = rng.integers(0, CLASSES * CLUSTERS, n)
    x = centres[cluster] + rng.normal(0.0, 1.0, (n, FEATURES))
    return x.astype(np.float32), (cluster % CLASSES).astype(np.int64)


class MLP(nn.Module):
    """fc1: Linear(6, 64) -> ReLU -> fc2: Linear(64, 4) (logits)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(FEATURES, HIDDEN)
        self.fc2 = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def save_weights(model: MLP, rank: int) -> None:
    out = Path("out")
    out.mkdir(exist_ok=True)
    arrays = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    np.savez(out / f"weights_rank{rank}.npz", **arrays)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--samples", type=int, default=4096, help="training set size")
    parser.add_argument("--batch", type=int, default=128, help="global batch (all ranks together)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # one thread: bit-for-bit the same result in every process

    x, y = make_data(args.seed, args.samples)
    dataset = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    loader = DataLoader(dataset, batch_size=args.batch, shuffle=True,
                        generator=torch.Generator().manual_seed(args.seed))
    torch.manual_seed(args.seed)
    model = MLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    for epoch in range(args.epochs):
        total, batches = 0.0, 0
        for xb, yb in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
            total, batches = total + loss.item(), batches + 1
        print(f"epoch {epoch}: mean loss {total / max(batches, 1):.4f}")
    save_weights(model, int(os.environ.get("RANK", "0")))


if __name__ == "__main__":
    main()
