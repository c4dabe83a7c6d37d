"""An ordinary PyTorch training script, shipped as the example project for `zico submit` (README).

It trains a small MLP on scikit-learn's handwritten digits (bundled with scikit-learn: no download), prints
its loss every epoch and saves the model to $ZICO_OUTPUT_DIR (or ./output) at the end. It runs as is without
Zico; under Zico it also reports its loss and accuracy with the optional `zico.log`.

    python train.py [--epochs 3] [--batch-size 128] [--lr 0.003]
"""
import argparse
import os

import torch
from sklearn.datasets import load_digits

try:
    import zico  # Zico's job API, present inside a Zico job; the script does not need it
    if not hasattr(zico, "log"):  # another package of that name
        zico = None
except ImportError:
    zico = None

ap = argparse.ArgumentParser()
ap.add_argument("--epochs", type=int, default=3)
ap.add_argument("--batch-size", type=int, default=128)
ap.add_argument("--lr", type=float, default=3e-3)
args = ap.parse_args()

torch.manual_seed(0)
digits = load_digits()
x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
y = torch.tensor(digits.target)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = torch.optim.Adam(model.parameters(), lr=args.lr)
steps_per_epoch = (len(x) + args.batch_size - 1) // args.batch_size
if zico is not None:
    zico.set_iterations_total(args.epochs * steps_per_epoch)
for epoch in range(args.epochs):
    perm = torch.randperm(len(x))
    for i in range(0, len(x), args.batch_size):
        idx = perm[i:i + args.batch_size]
        logits = model(x[idx])
        loss = torch.nn.functional.cross_entropy(logits, y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        accuracy = (model(x).argmax(1) == y).float().mean().item()
    print(f"epoch {epoch + 1}/{args.epochs}: loss {loss.item():.4f}, train accuracy {accuracy:.3f}", flush=True)
    if zico is not None:
        zico.log(loss=loss.item(), accuracy=accuracy, epoch=epoch + 1)
out = os.environ.get("ZICO_OUTPUT_DIR", "output")
os.makedirs(out, exist_ok=True)
torch.save(model.state_dict(), os.path.join(out, "model.pt"))
print(f"saved {os.path.join(out, 'model.pt')}")
