"""Treasure hunt 5: train a small MLP with DistributedDataParallel (DDP).

Run as `torchrun --standalone --nproc-per-node=2 solution.py --seed S --epochs E [--samples N
--batch B]`. Every rank must write its final weights to out/weights_rank{rank}.npz (see
save_weights). B is the global batch: the ranks share it.

Keep make_data, MLP and save_weights as they are: the grader uses the same generator and the
same architecture (and reads exactly these array names).
"""

from __future__ import annotations

import argparse
import os  # noqa: F401  (torchrun passes RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE)
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist  # noqa: F401  (you will need it)
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel  # noqa: F401  (you will need it)
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler  # noqa: F401  (you will need it)

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
    """out/weights_rank{rank}.npz with the keys fc1.weight, fc1.bias, fc2.weight, fc2.bias.

    Pass the plain MLP (`ddp.module`), not the DDP wrapper: its keys start with "module.".
    """
    out = Path("out")
    out.mkdir(exist_ok=True)
    arrays = {k: v.detach().cpu().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    np.savez(out / f"weights_rank{rank}.npz", **arrays)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--samples", type=int, default=4096, help="training set size")
    parser.add_argument("--batch", type=int, default=128, help="global batch (all ranks together)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(1)

    # TODO 1: join the process group: backend "nccl" when torch.cuda.is_available() (one GPU
    #         per process: torch.cuda.set_device(LOCAL_RANK)), else "gloo" on the CPU.
    #         Then rank = dist.get_rank(), world = dist.get_world_size().
    raise NotImplementedError("the distributed part is not written yet")

    x, y = make_data(args.seed, args.samples)
    dataset = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    # TODO 2: give each rank its share of the data with a DistributedSampler
    #         (DataLoader(dataset, batch_size=args.batch // world, sampler=sampler):
    #         --batch is the global batch, shared by the ranks).
    loader = DataLoader(dataset, batch_size=args.batch, shuffle=True)

    torch.manual_seed(args.seed)
    model = MLP()
    # TODO 3: wrap the model in DistributedDataParallel and optimise the wrapper's parameters.
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)

    for epoch in range(args.epochs):
        # TODO 4: sampler.set_epoch(epoch), so that every epoch is shuffled differently.
        for xb, yb in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}: last loss {loss.item():.4f}")

    # TODO 5: every rank saves its weights (save_weights(model, rank)), then leave the
    #         process group (dist.destroy_process_group()).


if __name__ == "__main__":
    main()
