"""Memory outside torch held by child processes: the script forks six children that each write 32 MiB of plain
memory and wait, while it goes on training (its own anonymous memory stays where it was)."""
import os
import time

import torch

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(6):
    if os.fork() == 0:  # a child: plain memory, every page written, then waiting to be killed
        held = bytearray(b"\x01") * (32 << 20)
        while True:
            time.sleep(1)
while True:
    loss = model(torch.randn(16, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.05)
