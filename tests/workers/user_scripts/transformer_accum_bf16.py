"""A plain PyTorch script: a small Transformer encoder language model, bf16 autocast on the CPU, gradients
accumulated over 4 micro-batches per optimizer step (AdamW), 3 steps."""
import torch

torch.manual_seed(0)
VOCAB, D, SEQ, ACCUM, STEPS = 500, 64, 32, 4, 3


class LM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, D)
        layer = torch.nn.TransformerEncoderLayer(D, nhead=4, dim_feedforward=128, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, num_layers=2)
        self.out = torch.nn.Linear(D, VOCAB)

    def forward(self, tokens):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(tokens.shape[1])
        return self.out(self.enc(self.emb(tokens), mask=mask, is_causal=True))


model = LM()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
data = torch.randint(0, VOCAB, (STEPS * ACCUM, 8, SEQ + 1))
micro = 0
for step in range(STEPS):
    opt.zero_grad()
    for _ in range(ACCUM):
        batch = data[micro]
        micro += 1
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(batch[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
        (loss / ACCUM).backward()
    opt.step()
print(f"transformer: {STEPS} steps of {ACCUM} micro-batches, logits {logits.dtype}, final loss {loss.item():.4f}")
