"""Trains two steps, then raises (a user's bug)."""
import torch

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    loss = model(torch.randn(16, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 1:
        raise ValueError("batch 2 has the wrong shape")  # line 12
