"""A plain PyTorch script (it knows nothing of Zico): an MLP classifier trained with Adam on random data,
printing one line per optimizer step.

python mlp_adam.py [--steps N] [--batch B] [--hidden H] [--features F]"""
import argparse

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--batch", type=int, default=2048)
ap.add_argument("--hidden", type=int, default=512)
ap.add_argument("--features", type=int, default=256)
args = ap.parse_args()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(args.features, args.hidden), torch.nn.ReLU(),
                            torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU(),
                            torch.nn.Linear(args.hidden, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(args.batch, args.features)
y = torch.randint(0, 10, (args.batch,))
for step in range(args.steps):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"mlp step {step} loss {loss.item():.4f}", flush=True)
print(f"mlp done: {args.steps} steps")
