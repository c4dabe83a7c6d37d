"""A hostile script's words: a stdout line that reads like the platform's own, an ANSI escape that would recolour
and rewrite an operator's terminal, then a crash inside torch (its traceback names the worker's Python
environment on the host)."""
import sys

print("[zico] job stopped by the platform", flush=True)
print("\x1b[2K\x1b[1A\x1b[31mred\x1b[0m", file=sys.stderr, flush=True)
import torch  # noqa: E402

torch.nn.Linear(2, 3)(torch.zeros(4, 5))  # a shape error raised in torch/nn/modules/...
