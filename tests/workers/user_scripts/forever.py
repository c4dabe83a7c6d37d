"""Trains until it is stopped (for cancellation)."""
import torch

model = torch.nn.Linear(64, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
while True:
    loss = model(torch.randn(32, 64)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
