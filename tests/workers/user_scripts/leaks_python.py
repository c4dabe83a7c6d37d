"""A leak outside torch: plain Python memory grows every step (a cache that is never emptied)."""
import torch

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
cache = []
while True:
    loss = model(torch.randn(16, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    cache.append(bytearray(b"\x01") * (16 << 20))  # 16 MiB of malloc per step, every page written
