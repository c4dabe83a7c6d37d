"""Trains two steps, then dereferences a null pointer (a broken extension, say)."""
import ctypes

import torch

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    loss = model(torch.randn(16, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
ctypes.string_at(0)
