"""A plain PyTorch script: an LSTM sequence classifier, SGD with momentum and gradient-norm clipping."""
import torch

torch.manual_seed(0)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(32, 64, num_layers=2, batch_first=True)
        self.head = torch.nn.Linear(64, 5)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
x = torch.randn(64, 40, 32)
y = torch.randint(0, 5, (64,))
for step in range(8):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    opt.step()
print(f"lstm: 8 steps, final loss {loss.item():.4f}, last grad norm {norm.item():.3f}")
