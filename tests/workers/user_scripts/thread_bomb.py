"""A hostile script: starts threads without end (each waits forever) after one training step; at the process
limit Python's ``Thread.start`` fails and the script lets it propagate, saying first how many it started
(``BOMB {json}``)."""
import json
import os
import threading

import torch

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(16, 8)).pow(2).mean().backward()
opt.step()
forever = threading.Event()
started = 0
try:
    while True:
        threading.Thread(target=forever.wait, daemon=True).start()
        started += 1
except Exception as exc:
    print("BOMB " + json.dumps({"started": started, "error": f"{type(exc).__name__}: {exc}",
                                "own_threads": len(os.listdir("/proc/self/task"))}), flush=True)
    raise
