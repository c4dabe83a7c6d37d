"""A plain PyTorch script (it knows nothing of Zico): a small Transformer encoder language model under bf16
autocast on the CPU, gradients accumulated over several micro-batches per AdamW step, printing one line per
optimizer step.

python transformer_accum_bf16.py [--steps N] [--accumulate K] [--batch B] [--seq T]"""
import argparse

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=12)
ap.add_argument("--accumulate", type=int, default=2)
ap.add_argument("--batch", type=int, default=16)
ap.add_argument("--seq", type=int, default=64)
args = ap.parse_args()
torch.manual_seed(0)
vocab, width = 1000, 128
layer = torch.nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=512, batch_first=True)
model = torch.nn.ModuleDict({"embed": torch.nn.Embedding(vocab, width),
                             "encoder": torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False),
                             "head": torch.nn.Linear(width, vocab)})
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.randint(0, vocab, (args.accumulate, args.batch, args.seq + 1))
for step in range(args.steps):
    opt.zero_grad()
    total = 0.0
    for micro in range(args.accumulate):
        tokens = data[micro]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            hidden = model["encoder"](model["embed"](tokens[:, :-1]))
            logits = model["head"](hidden)
            loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, vocab), tokens[:, 1:].reshape(-1))
        (loss / args.accumulate).backward()
        total += loss.item() / args.accumulate
    opt.step()
    print(f"transformer step {step} loss {total:.4f}", flush=True)
print(f"transformer done: {args.steps} steps")
