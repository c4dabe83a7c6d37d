"""A plain PyTorch script (knows nothing of Zico): an MLP trained with Adam on random data.

python mlp_adam.py --steps N [--until-file PATH]: N optimizer steps; with --until-file, steps until PATH exists
(then it ends normally)."""
import argparse
import os

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=12)
ap.add_argument("--until-file")
args = ap.parse_args()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
x = torch.randn(2048, 256)  # 2 MiB of input
y = torch.randint(0, 10, (2048,))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
step = 0
while (step < args.steps) if not args.until_file else not os.path.exists(args.until_file):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
print(f"mlp: {step} steps, final loss {loss.item():.4f}")
