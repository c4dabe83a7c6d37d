"""A plain PyTorch script (knows nothing of Zico) whose every step needs a large batch, not a leak: a linear model
trained on a fresh batch of ``--mib`` MiB of random rows each step (the batch is freed when the step ends).

python big_steps.py --mib M --steps N"""
import argparse

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--mib", type=int, default=200)
ap.add_argument("--steps", type=int, default=10)
args = ap.parse_args()
torch.manual_seed(0)
model = torch.nn.Linear(1024, 1)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
rows = args.mib * (1 << 20) // (4 * 1024)  # float32 rows of 1024
for step in range(args.steps):
    batch = torch.randn(rows, 1024)
    loss = model(batch).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    del batch, loss
print(f"big_steps: {args.steps} steps of {args.mib} MiB")
