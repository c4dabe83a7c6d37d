"""A hostile script: it holds host memory as shared memory, which ``RssAnon`` does not count, 16 MiB a step:
``mmap`` (``MAP_SHARED | MAP_ANONYMOUS``), ``memfd`` (written through the fd, never mapped) or ``devshm``
(files in /dev/shm until it is full, then plain memory). If it ever holds 512 MiB it says so and keeps holding it
for 30 s (a watch that sampled too late still finds it: only a watch that never counts it lets it end well)."""
import mmap
import os
import sys
import time

import torch

mode = sys.argv[1]
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
held, keep, shm_full = 0, [], None
chunk = b"\x01" * (16 << 20)
while held < (512 << 20):
    loss = model(torch.randn(16, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if mode == "mmap":
        m = mmap.mmap(-1, len(chunk))
        m.write(chunk)
        keep.append(m)
    elif mode == "memfd":
        fd = os.memfd_create("not-a-zico-chunk")
        os.write(fd, chunk)
        keep.append(fd)
    elif shm_full is None:
        try:
            with open(f"/dev/shm/fill-{held >> 24}", "wb") as f:
                f.write(chunk)
        except OSError:
            shm_full = held
            print(f"/dev/shm full at {held >> 20} MiB", flush=True)
    else:
        keep.append(bytearray(chunk))
    held += len(chunk)
    print("held MiB", held >> 20, flush=True)
print("held it all", flush=True)
until = time.monotonic() + 30
while time.monotonic() < until:  # holding it, an iteration at a time, for 30 s (then it ends, having got away)
    loss = model(torch.randn(16, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
