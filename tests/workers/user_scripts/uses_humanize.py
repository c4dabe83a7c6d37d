"""A plain PyTorch script that imports a package its project's requirements.txt asks for (humanize), which the
worker's own environment does not have: a few Adam steps, then the model's size in humanize's words."""
import humanize
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))
for _ in range(6):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
size = sum(p.numel() * p.element_size() for p in model.parameters())
print(f"humanize {humanize.__version__}: the model holds {humanize.naturalsize(size, binary=True)}")
