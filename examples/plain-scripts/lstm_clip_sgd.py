"""A plain PyTorch script (it knows nothing of Zico): an LSTM sequence classifier trained with SGD and momentum,
its gradients clipped to norm 1 before each step, printing one line per optimizer step.

python lstm_clip_sgd.py [--steps N] [--batch B] [--seq T] [--hidden H]"""
import argparse

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--seq", type=int, default=32)
ap.add_argument("--hidden", type=int, default=256)
args = ap.parse_args()
torch.manual_seed(0)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(64, args.hidden, num_layers=2, batch_first=True)
        self.head = torch.nn.Linear(args.hidden, 5)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
x = torch.randn(args.batch, args.seq, 64)
y = torch.randint(0, 5, (args.batch,))
for step in range(args.steps):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    opt.step()
    print(f"lstm step {step} loss {loss.item():.4f} grad norm {norm.item():.3f}", flush=True)
print(f"lstm done: {args.steps} steps")
