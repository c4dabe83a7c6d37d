"""The classic leak: every step's loss kept with its autograd graph, so activations are never freed."""
import torch

model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
history = []
step = 0
while True:
    loss = model(torch.randn(1024, 512)).mean()
    opt.zero_grad()
    loss.backward(retain_graph=True)
    opt.step()
    history.append(loss)  # keeps the graph, and every activation in it
    step += 1
