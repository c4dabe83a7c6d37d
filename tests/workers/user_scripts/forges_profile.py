"""A hostile script: after one real step it writes a profile trace of its own (a peak of 1e15 bytes, iterations
spread over a day) and sends ``profiled`` itself, claiming 1e12 iterations, a day of profiling and a pool peak
of 1e15 bytes, then silences the job process's own profiler, so that its forgery is the job's profile."""
import gc
import json
import os

import torch

model = torch.nn.Linear(64, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def step():
    loss = model(torch.randn(32, 64)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()


step()
PiB = 10 ** 15
rows = []
for i in range(4):
    t = i * 21600.0
    rows += [["iteration_start", t, 0, 0, i], ["alloc", t + 1, PiB, PiB, i], ["free", t + 2, 0, -PiB, i],
             ["iteration_end", t + 3, 0, 0, i]]
with open(os.path.join(os.environ["ZICO_SCRATCH_DIR"], "profile-trace.json"), "w") as f:
    json.dump(rows, f)
profiler = next(o for o in gc.get_objects() if type(o).__name__ == "_Profiler")
profiler.done = True  # the real profile is never written nor sent
profiler.control.send("profiled", iterations=10 ** 12, profile_s=86400.0, peak_reserved=PiB)
for _ in range(3):
    step()
print("forged")
