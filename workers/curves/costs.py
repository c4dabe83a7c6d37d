"""Operator cost model: the modelled clock of the fake-tensor estimate.

Each operator takes ``overhead + max(flops / flops_per_s, bytes / bytes_per_s)`` seconds, a
roofline (Williams, Waterman, Patterson, CACM 2009). FLOPs come from PyTorch's own
``torch.utils.flop_counter.flop_registry`` (matmuls, convolutions, attention); every other
operator counts as memory-bound, moving its inputs' and outputs' bytes once.

For ``cpu`` the rates are measured on this machine (a matmul and a large add, ~0.2 s, once per
process). For ``cuda`` they are datasheet figures of an NVIDIA H100/H200 SXM (dense FP32 67 TFLOPS,
BF16 tensor cores 989 TFLOPS, HBM3e 4.8 TB/s) derated to rates eager PyTorch reaches (about half
and 70 %), with ~6 us launch overhead per operator. Only ratios matter for the curve's shape;
the absolute figures set ``iteration_s``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache

import torch
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

_HALF = (torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class DeviceCost:
    """Roofline rates: FLOP/s (fp32 and half precision), bytes/s, seconds of overhead per operator."""

    name: str
    flops_per_s: float
    half_flops_per_s: float
    bytes_per_s: float
    overhead_s: float

    def op_seconds(self, func, args, kwargs, out) -> float:
        """Modelled seconds of one aten operator call."""
        tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
        moved = sum(t.numel() * t.element_size() for t in tensors)
        seconds = moved / self.bytes_per_s
        count = flop_registry.get(func.overloadpacket)
        if count is not None:
            try:
                flops = count(*args, **kwargs, out_val=out)
            except Exception:  # noqa: BLE001 - an unusual signature costs as memory-bound
                flops = 0
            half = any(t.dtype in _HALF for t in tensors)
            seconds = max(seconds, flops / (self.half_flops_per_s if half else self.flops_per_s))
        return self.overhead_s + seconds


CUDA_COST = DeviceCost("cuda-h100-class", flops_per_s=0.5 * 67e12, half_flops_per_s=0.5 * 989e12,
                       bytes_per_s=0.7 * 4.8e12, overhead_s=6e-6)


@lru_cache(maxsize=1)
def measured_cpu_cost() -> DeviceCost:
    """Rates of this machine's CPU with torch's current thread count, measured once (~0.2 s)."""
    a = torch.randn(384, 384)
    torch.mm(a, a)
    t = time.perf_counter()
    for _ in range(8):
        torch.mm(a, a)
    flops = 8 * 2 * 384**3 / (time.perf_counter() - t)
    x = torch.randn(4_000_000)
    x + x
    t = time.perf_counter()
    for _ in range(4):
        x + x
    bw = 4 * 3 * x.numel() * 4 / (time.perf_counter() - t)
    y = torch.ones(4)
    t = time.perf_counter()
    for _ in range(200):
        y + y
    overhead = (time.perf_counter() - t) / 200
    return DeviceCost(f"cpu-measured-{torch.get_num_threads()}t", flops, flops, bw, overhead)


def cost_for(device: torch.device) -> DeviceCost:
    """The cost model for a target device."""
    return CUDA_COST if device.type == "cuda" else measured_cpu_cost()
