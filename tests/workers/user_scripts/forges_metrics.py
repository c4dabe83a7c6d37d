"""A hostile script: it tries to report figures the platform measures (its compute share, slowdown, gate delays),
first through zico.log, which refuses the name, then around it, straight into the job process's sink and
the figures its done message carries."""
import torch

import zico
import zico_job

try:
    zico.log(slowdown=0.01)
except ValueError as exc:
    print("refused:", exc)
model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(16, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
zico_job._sink.log({"slowdown": 0.01, "delay_s": 999.0, "delays": 999, "output_files": 999, "my_loss": float(loss)})
# a share is an object, which a metric message cannot carry: into the figures the done message sends
zico_job._sink.latest["compute_share"] = {"share": 0.001, "device": "cpu", "solo_s": 1.0, "samples": 99}
print("forged")
