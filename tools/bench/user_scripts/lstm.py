"""A plain PyTorch training script, as a user would submit it (no Zico import): a two-layer LSTM sequence
classifier on random data, SGD with momentum and gradient clipping. The slowdown table
(tools.bench.slowdown_table) runs it as a job with code.

    python lstm.py [--steps 12] [--batch-size 32] [--seq-len 60]
"""
import argparse

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=12)
ap.add_argument("--batch-size", type=int, default=32)
ap.add_argument("--seq-len", type=int, default=60)
args = ap.parse_args()

torch.manual_seed(0)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(64, 160, num_layers=2, batch_first=True)
        self.head = torch.nn.Linear(160, 5)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
x = torch.randn(args.batch_size, args.seq_len, 64)
y = torch.randint(0, 5, (args.batch_size,))
for step in range(args.steps):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    opt.step()
print(f"lstm: {args.steps} steps, final loss {loss.item():.4f}")
