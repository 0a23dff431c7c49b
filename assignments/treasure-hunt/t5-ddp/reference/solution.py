"""Reference solution for treasure hunt 5: an MLP trained with DistributedDataParallel.

Run as `torchrun --standalone --nproc-per-node=2 solution.py --seed S --epochs E [--samples N
--batch B]`; every rank writes its final weights to out/weights_rank{rank}.npz. The global batch
B is shared by the ranks (B / world each), so a step costs each rank half the work.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

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
    """out/weights_rank{rank}.npz with the keys fc1.weight, fc1.bias, fc2.weight, fc2.bias."""
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
    # NCCL wants one GPU per process; with fewer GPUs than local processes stay on gloo + CPU.
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    use_cuda = torch.cuda.is_available() and torch.cuda.device_count() >= local_world
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    x, y = make_data(args.seed, args.samples)
    dataset = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True,
                                 seed=args.seed)
    loader = DataLoader(dataset, batch_size=args.batch // world, sampler=sampler)

    torch.manual_seed(args.seed)  # same start everywhere (DDP also broadcasts rank 0's)
    model = MLP().to(device)
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=LR, momentum=MOMENTUM)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # a different shuffle every epoch, the same on every rank
        total, batches = 0.0, 0
        for xb, yb in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(ddp(xb.to(device)), yb.to(device))
            loss.backward()  # DDP averages the gradients over the ranks here
            optimizer.step()
            total, batches = total + loss.item(), batches + 1
        if rank == 0:
            print(f"epoch {epoch}: mean loss {total / max(batches, 1):.4f} (rank 0's shard)")

    save_weights(model, rank)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
