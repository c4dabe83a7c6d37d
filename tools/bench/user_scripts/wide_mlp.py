"""A plain PyTorch training script, as a user would submit it (no Zico import): a wide MLP on random data with
Adam. The slowdown table (tools.bench.slowdown_table) runs it as a job with code.

    python wide_mlp.py [--steps 12] [--width 1536] [--batch-size 256]
"""
import argparse

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=12)
ap.add_argument("--width", type=int, default=1536)
ap.add_argument("--batch-size", type=int, default=256)
args = ap.parse_args()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, args.width), torch.nn.ReLU(), torch.nn.Linear(args.width, args.width),
                            torch.nn.ReLU(), torch.nn.Linear(args.width, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(args.batch_size, 512)
y = torch.randint(0, 10, (args.batch_size,))
for step in range(args.steps):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"wide_mlp: {args.steps} steps, final loss {loss.item():.4f}")
