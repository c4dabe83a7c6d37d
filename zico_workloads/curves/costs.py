"""Operator cost model: the modelled clock of the fake-tensor estimate.

Each operator takes ``overhead + max(flops / flops_per_s, bytes / bytes_per_s)`` seconds, a
roofline (Williams, Waterman, Patterson, CACM 2009). FLOPs come from PyTorch's own
``torch.utils.flop_counter.flop_registry`` (matmuls, convolutions, attention); every other
operator counts as memory-bound, moving its inputs' and outputs' bytes once.

For ``cpu`` the rates are measured on this machine (a matmul, a convolution, a large add and the
operator overhead of each phase of a tiny training step; ~0.3 s, once per process). Convolutions
get their own rate: oneDNN reaches about half the matmul rate on small images here. For ``cuda`` they are datasheet figures of an NVIDIA H100/H200 SXM (dense FP32 67 TFLOPS,
BF16 tensor cores 989 TFLOPS, HBM3e 4.8 TB/s) derated to rates eager PyTorch reaches (about half
and 70 %), with ~6 us launch overhead per operator. Only ratios matter for the curve's shape;
the absolute figures set ``iteration_s``.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from functools import cached_property, lru_cache

import torch
from torch.utils.flop_counter import flop_registry

_HALF = (torch.bfloat16, torch.float16)
_aten = torch.ops.aten
_CONV = {_aten.convolution, _aten.convolution_backward, _aten._convolution}
# The CPU flash-attention kernels count like the CUDA ones (same arguments first; not in the registry).
_FLOPS = {
    **flop_registry,
    _aten._scaled_dot_product_flash_attention_for_cpu: flop_registry[_aten._scaled_dot_product_flash_attention],
    _aten._scaled_dot_product_flash_attention_for_cpu_backward:
        flop_registry[_aten._scaled_dot_product_flash_attention_backward],
}


def tensors_in(tree) -> list[torch.Tensor]:
    """The tensors in an operator's arguments or outputs (tensors inside tuples, lists and dicts, nested),
    in ``torch.utils._pytree.tree_flatten``'s order. Per operator call this is the recorder's and the
    cost model's own largest cost; the general pytree walk took twice as long."""
    out: list[torch.Tensor] = []
    _collect(tree, out)
    return out


def _collect(x, out: list[torch.Tensor]) -> None:
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (tuple, list)):
        for y in x:
            _collect(y, out)
    elif isinstance(x, dict):
        for y in x.values():
            _collect(y, out)


@dataclass(frozen=True)
class DeviceCost:
    """Roofline rates: FLOP/s (fp32 and half precision), bytes/s, and seconds of overhead per
    operator in each phase (eager Python code issues forward and optimizer operators; the C++
    autograd engine issues backward ones, with far less overhead each)."""

    name: str
    flops_per_s: float
    half_flops_per_s: float
    bytes_per_s: float
    overhead_s: float
    phase_overhead_s: tuple[tuple[str, float], ...] = ()
    conv_flops_per_s: float | None = None  # convolutions, when they run at another rate than matmuls
    # Bytes of the cuBLAS workspace torch keeps per (thread's cuBLAS handle, stream) once a matmul ran
    # there; 0 where no such workspace exists (CPU). See Note [cuBLAS workspaces] in estimate.py.
    blas_workspace_bytes: int = 0
    # Seconds each operator of the overhead calibration spent inside its kernel, per phase (CPU only):
    # what a cost model that measures operator times subtracts from the overhead (op_timing.py).
    phase_op_s: tuple[tuple[str, float], ...] = ()
    # Seconds ``zero_grad(set_to_none=True)`` takes per parameter: Python that frees gradients and
    # issues no operator, so without it every gradient would be freed at one instant (CPU only).
    zero_grad_s_per_param: float = 0.0
    # Seconds per forward operator of dropping the loss after the step: the autograd graph (one node
    # per differentiable forward operator) is destroyed, ~0.1-0.5 ms at the end of a ResNet or GPT-2
    # iteration on this CPU, measured (CPU only).
    teardown_s_per_op: float = 0.0

    def overhead_for(self, phase: str | None) -> float:
        """Seconds of overhead per operator issued in ``phase``."""
        return self._phase_overheads.get(phase, self.overhead_s)

    @cached_property
    def _phase_overheads(self) -> dict[str, float]:
        return dict(self.phase_overhead_s)

    def op_seconds(self, func, args, kwargs, out, phase: str | None = None) -> float:
        """Modelled seconds of one aten operator call issued in ``phase``. A view (``t``, ``detach``,
        ``expand``...) moves no data: overhead only. An embedding lookup reads the rows it gathers, not
        the whole table (GPT-2's is 154 MB)."""
        if func.is_view:
            return self.overhead_for(phase)
        # embedding(weight, indices): the indices, the rows read (as many bytes as the output) and the output
        touched = (args[1:], out, out) if func.overloadpacket is _aten.embedding else (args, kwargs, out)
        tensors = tensors_in(touched)
        moved = sum(t.numel() * t.element_size() for t in tensors)
        seconds = moved / self.bytes_per_s
        count = _FLOPS.get(func.overloadpacket)
        if count is not None:
            try:
                flops = count(*args, **kwargs, out_val=out)
            except Exception:  # noqa: BLE001 - an unusual signature costs as memory-bound
                flops = 0
            half = any(t.dtype in _HALF for t in tensors)
            rate = self.half_flops_per_s if half else self.flops_per_s
            if self.conv_flops_per_s and func.overloadpacket in _CONV:
                rate = self.conv_flops_per_s
            seconds = max(seconds, flops / rate)
        return self.overhead_for(phase) + seconds


# PyTorch's default cuBLAS workspace on compute capability 9.x (Hopper): 4096 KiB x 8 = 32 MiB
# (aten/src/ATen/cuda/CublasHandlePool.cpp, getChosenWorkspaceSize; 4096 KiB x 2 + 16 KiB x 8 on
# older GPUs; CUBLAS_WORKSPACE_CONFIG overrides it). cuBLASLt shares it by default.
HOPPER_BLAS_WORKSPACE_BYTES = 4096 * 1024 * 8

CUDA_COST = DeviceCost("cuda-h100-class", flops_per_s=0.5 * 67e12, half_flops_per_s=0.5 * 989e12,
                       bytes_per_s=0.7 * 4.8e12, overhead_s=6e-6, blas_workspace_bytes=HOPPER_BLAS_WORKSPACE_BYTES)


def measured_cpu_cost(optimizer: str = "adamw") -> DeviceCost:
    """Rates of this machine's CPU with torch's current thread count, measured once per optimizer
    (~0.3 s): a 384^3 matmul, a 3x3 convolution (batch 2, 64 -> 64 channels, 32 x 32), a
    4-M-element add, and the per-phase operator overhead of a tiny training step with
    ``optimizer`` ("sgd" or "adamw", as ``zico_workloads.training.make_optimizer`` builds them).
    Torch's global random state is left as it was (co-located jobs draw from it)."""
    return _measured_cpu_cost(optimizer, torch.get_num_threads())


@lru_cache(maxsize=8)
def _measured_cpu_cost(optimizer: str, threads: int) -> DeviceCost:
    with torch.random.fork_rng(devices=[]):
        return _measure_cpu_cost(optimizer)


def _measure_cpu_cost(optimizer: str) -> DeviceCost:
    a = torch.randn(384, 384)
    flops = 2 * 384**3 / best_seconds(lambda: torch.mm(a, a))
    conv = torch.nn.Conv2d(64, 64, 3, padding=1)
    img = torch.randn(2, 64, 32, 32)
    with torch.no_grad():
        conv_flops = 2 * 2 * 64 * 64 * 9 * 32 * 32 / best_seconds(lambda: conv(img))
    x = torch.randn(4_000_000)
    bw = 3 * x.numel() * 4 / best_seconds(lambda: x + x)
    phases, inside, zero_grad, teardown = _phase_overheads(optimizer)
    return DeviceCost(f"cpu-measured-{torch.get_num_threads()}t-{optimizer}", flops, flops, bw,
                      phases["forward"], tuple(phases.items()), conv_flops, phase_op_s=tuple(inside.items()),
                      zero_grad_s_per_param=zero_grad, teardown_s_per_op=teardown)


def best_seconds(fn, reps: int = 6) -> float:
    """Fastest of ``reps`` timed calls after one warm-up (the least disturbed by other processes)."""
    fn()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _call_seconds(func, args, kwargs) -> float:
    """Best of 3 timed calls of one recorded operator call; 0 for one that cannot be repeated."""
    try:
        return best_seconds(lambda: func(*args, **kwargs), reps=3)
    except RuntimeError:
        return 0.0


def _phase_overheads(optimizer: str = "adamw", iterations: int = 10
                     ) -> tuple[dict[str, float], dict[str, float], float, float]:
    """Seconds per operator in each phase of a tiny real training step (8 linear layers of width
    16, batch 2, ``optimizer``), where compute is negligible and overhead is all there is:
    operators are counted once under a dispatch mode, and the phases are timed without it (each
    phase's median over ``iterations`` steps: robust to a disturbed step, and unlike the fastest not
    below what a real run's steps take on average).
    Second: the mean seconds per operator call when each is timed alone, as
    ``op_timing.MeasuredOpCost`` times them, per phase. Third: seconds per parameter of
    ``zero_grad(set_to_none=True)``, which issues no operator (timed apart from the optimizer).
    Fourth: seconds per forward operator of dropping the loss (its autograd graph) afterwards."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from zico_workloads.training import make_optimizer

    class Record(TorchDispatchMode):
        calls: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Record.calls.append((func, args, kwargs or {}))
            return func(*args, **(kwargs or {}))

    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU()) for _ in range(8)])
    opt = make_optimizer({"optimizer": optimizer, "lr": 1e-3}, model)
    x = torch.randn(2, 16)

    def step(timer: dict[str, list[float]] | None = None, calls: dict[str, list] | None = None):
        for name, fn in (("forward", lambda: model(x).square().mean()), ("backward", None), ("optimizer", None),
                         ("zero_grad", None), ("teardown", None)):
            t0, c0 = time.perf_counter(), len(Record.calls)
            if name == "forward":
                loss = fn()
            elif name == "backward":
                loss.backward()
            elif name == "optimizer":
                opt.step()
            elif name == "zero_grad":
                opt.zero_grad(set_to_none=True)
            else:
                loss = None  # the last reference: the graph goes
            if timer is not None:
                timer.setdefault(name, []).append(time.perf_counter() - t0)
            if calls is not None:
                calls[name] = Record.calls[c0:]

    step()  # optimizer state, caches
    calls: dict[str, list] = {}
    with Record():
        step(calls=calls)
    counts = {k: len(v) for k, v in calls.items()}
    # each operator call timed alone as op_timing.MeasuredOpCost times them: best of 3 after a warm-up
    with torch.no_grad():
        inside = {k: sum(_call_seconds(f, a, kw) for f, a, kw in v) for k, v in calls.items()}
    samples: dict[str, list[float]] = {}
    for _ in range(iterations):
        step(samples)
    times = {k: statistics.median(v) for k, v in samples.items()}
    zero_grad = times.pop("zero_grad") / len(list(model.parameters()))
    teardown = times.pop("teardown") / max(counts["forward"], 1)
    return ({k: times[k] / max(counts[k], 1) for k in times},
            {k: inside[k] / max(counts[k], 1) for k in times}, zero_grad, teardown)


def cost_for(device: torch.device, optimizer: str = "adamw") -> DeviceCost:
    """The cost model for a target device and a training job's optimizer ("sgd" or "adamw")."""
    return CUDA_COST if device.type == "cuda" else measured_cpu_cost(optimizer)
