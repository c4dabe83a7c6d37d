"""A script that uses Zico's optional API: its total iteration count and its loss and accuracy."""
import torch

import zico

zico.set_iterations_total(5)
torch.manual_seed(0)
model = torch.nn.Linear(20, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(128, 20), torch.randint(0, 2, (128,))
for step in range(5):
    logits = model(x)
    loss = torch.nn.functional.cross_entropy(logits, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    zico.log(loss=loss, accuracy=(logits.argmax(1) == y).float().mean(), note="epoch-0")
print("zico running:", zico.running(), "job", zico.job_id())
