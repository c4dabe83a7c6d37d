"""A plain PyTorch script on the GPU: an MLP with Adam; says how many GPUs it sees."""
import torch

assert torch.cuda.is_available(), "no GPU visible"
dev = torch.device("cuda")
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10)).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x, y = torch.randn(4096, 1024, device=dev), torch.randint(0, 10, (4096,), device=dev)
for step in range(10):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.cuda.synchronize()
print(f"cuda: {torch.cuda.device_count()} GPU visible, {torch.cuda.get_device_name(0)}, final loss {loss.item():.4f}")
