"""A plain PyTorch script (knows nothing of Zico): an MLP trained with Adam on random data.

python mlp_adam.py --steps N [--until-file PATH [--more M]]: N optimizer steps; with --until-file, steps until PATH
exists, then M more (default 0), then it ends normally."""
import argparse
import os

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=12)
ap.add_argument("--until-file")
ap.add_argument("--more", type=int, default=0)
args = ap.parse_args()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
x = torch.randn(2048, 256)  # 2 MiB of input
y = torch.randint(0, 10, (2048,))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
step, last = 0, None
while (step < args.steps) if not args.until_file else (last is None or step < last):
    if args.until_file and last is None and os.path.exists(args.until_file):
        last = step + args.more
        continue
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
print(f"mlp: {step} steps, final loss {loss.item():.4f}")
