"""A plain PyTorch script (knows nothing of Zico): an MLP trained on a Dataset read through
``DataLoader(num_workers=2)``, whose two worker processes build each batch (and hold memory of their own).

python dataloader_workers.py --steps N: N optimizer steps; prints the worker processes' pids it saw."""
import argparse
import os

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=12)
ap.add_argument("--workers", type=int, default=2)
args = ap.parse_args()


class Random(Dataset):
    def __init__(self, n: int):
        self.n = n
        self.ballast = None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.ballast is None:  # each worker process holds 16 MiB of its own (a cache, a decoded shard...)
            self.ballast = bytearray(16 << 20)
            self.ballast[:: 4096] = b"x" * len(self.ballast[:: 4096])
        g = torch.Generator().manual_seed(i)
        return torch.randn(256, generator=g), int(i % 10), os.getpid(), (get_worker_info().id if get_worker_info() else -1)


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
loader = DataLoader(Random(256 * args.steps), batch_size=256, num_workers=args.workers)
pids, step = set(), 0
for x, y, pid, _worker in loader:
    pids.update(int(p) for p in pid)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
print(f"dataloader: {step} steps, final loss {loss.item():.4f}, {len(pids)} worker processes (main {os.getpid()})")
