"""A script that marks its iterations with ``zico.iteration()`` (Note [Explicit iterations] in workers.job.stepclock).

python explicit_iterations.py --mode manual --blocks N [--until-file PATH]
    no torch optimizer: an MLP trained with hand-written SGD updates, one block per batch; with --until-file, also
    keeps training (N blocks at least) until PATH exists
python explicit_iterations.py --mode both --plain K --blocks N
    an optimizer too: K plain Adam steps (iterations counted from the optimizer), then N blocks of two
    micro-batches, each with its own Adam step (the blocks count, the steps inside them do not)

Prints ``explicit: <blocks> blocks, <steps> optimizer steps, final loss <x>``."""
import argparse
import os

import torch

import zico

ap = argparse.ArgumentParser()
ap.add_argument("--mode", choices=("manual", "both"), required=True)
ap.add_argument("--blocks", type=int, default=6)
ap.add_argument("--plain", type=int, default=0)
ap.add_argument("--until-file")
args = ap.parse_args()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
x = torch.randn(4096, 256)
y = torch.randint(0, 10, (4096,))


def loss_of(rows):
    return torch.nn.functional.cross_entropy(model(x[rows]), y[rows])


steps = blocks = 0
if args.mode == "manual":
    while blocks < args.blocks or (args.until_file and not os.path.exists(args.until_file)):
        with zico.iteration():
            loss = loss_of(slice(None))
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.05 * p.grad
                    p.grad = None
        blocks += 1
else:
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(args.plain):
        loss = loss_of(slice(None))
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
    for _ in range(args.blocks):
        with zico.iteration():
            for half in (slice(0, 2048), slice(2048, None)):
                loss = loss_of(half)
                opt.zero_grad()
                loss.backward()
                opt.step()
                steps += 1
        blocks += 1
print(f"explicit: {blocks} blocks, {steps} optimizer steps, final loss {loss.item():.4f}")
