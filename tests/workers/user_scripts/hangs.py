"""A hostile script: trains three steps, says so, then hangs: no step, no line, no exit, ever (a deadlock)."""
import threading

import torch

model = torch.nn.Linear(64, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(3):
    loss = model(torch.randn(32, 64)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("hanging now", flush=True)
threading.Event().wait()
