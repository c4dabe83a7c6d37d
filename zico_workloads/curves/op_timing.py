"""Measured operator times: the modelled clock of a CPU-target estimate, from this machine.

Note [Measured operator times]
The roofline (:mod:`zico_workloads.curves.costs`) prices every memory-bound operator at one bandwidth,
measured on a large add. On a CPU many operators are far off that line (pooling, dropout's
``bernoulli_``, ``tanh``, elementwise ``mul``: up to tens of times slower; figures in
docs/curve-accuracy.md), and their share of the iteration is where the estimate put its memory steps
at the wrong moment.

So for a CPU target the estimate runs each distinct operator call once for real: the first time a
signature (operator, and every argument's shape, stride and dtype, or value) is seen, the call is
repeated on real tensors of those shapes (floats drawn from U[0.5, 1.5): no NaN from a ``sqrt`` or
``log``, which made AdamW's ``sqrt`` 12x slower than on its real, non-negative state; integers and
booleans zero, so that indices are in range), once to warm up and then timed, best of ``reps``
(``costs.best_seconds``, as the calibration times its own operators). A signature whose tensors
exceed ``max_bytes`` together, or that fails on made-up values, is priced by the roofline
instead. Real memory held is one operator's tensors at a time, freed before the next, and never
more than ``max_bytes`` (64 MiB by default); torch's random state is restored afterwards.

Per-operator *overhead* (Python between operators) stays the roofline model's per-phase figure,
less the measured time of the tiny calibration step's own operators, so it is not counted twice.
"""
from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from zico_workloads.curves.costs import DeviceCost, best_seconds

DEFAULT_MAX_BYTES = 64 * 2**20


class MeasuredOpCost:
    """Cost model with ``DeviceCost``'s interface whose operator seconds are measured here.

    ``base`` gives the per-phase overheads and the calibration's other figures (read through this
    object), and prices what cannot be measured. ``measured`` counts the distinct signatures seen.
    """

    def __init__(self, base: DeviceCost, max_bytes: int = DEFAULT_MAX_BYTES, reps: int = 3):
        self.base = base
        self.name = f"{base.name}+measured-ops"
        self.max_bytes = max_bytes
        self.reps = reps
        self._seconds: dict[tuple, float | None] = {}

    def __getattr__(self, name: str) -> Any:
        # the calibration's figures (blas_workspace_bytes, zero_grad_s_per_param, ...) are the base's
        if name == "base":  # not set yet (a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self.base, name)

    @property
    def measured(self) -> int:
        return len(self._seconds)

    def op_seconds(self, func, args, kwargs, out, phase: str | None = None) -> float:
        """Modelled seconds of one aten operator call issued in ``phase`` (see the module note)."""
        key = _signature(func, args, kwargs)
        if key not in self._seconds:
            self._seconds[key] = self._measure(func, args, kwargs, out)
        seconds = self._seconds[key]
        if seconds is None:
            return self.base.op_seconds(func, args, kwargs, out, phase)
        return self._overhead(phase) + seconds

    def _overhead(self, phase: str | None) -> float:
        return max(self.base.overhead_for(phase) - dict(self.base.phase_op_s).get(phase, 0.0), 0.0)

    def _measure(self, func, args, kwargs, out) -> float | None:
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        # the fake call's inputs and outputs tell the real memory a measurement needs, before it runs
        leaves = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
        if sum(_extent_bytes(t) for t in leaves) > self.max_bytes:
            return None
        with unset_fake_temporarily(), torch.random.fork_rng(devices=[]):
            try:
                real_args, real_kwargs = tree_map(_real_like, (args, kwargs))
                return best_seconds(lambda: func(*real_args, **real_kwargs), self.reps)
            except Exception:  # noqa: BLE001 - made-up values a kernel refuses: price by the roofline
                return None


def _extent_bytes(t: torch.Tensor) -> int:
    """Bytes a tensor's view spans (its storage may be larger; only the view is made up)."""
    if t.numel() == 0:
        return 0
    return (1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride()))) * t.element_size()


def _real_like(v: Any) -> Any:
    """A real CPU tensor shaped like fake tensor ``v`` (other values unchanged)."""
    if not isinstance(v, torch.Tensor):
        return v
    if v.layout != torch.strided or v.is_nested or v.is_quantized:
        raise TypeError("only strided dense tensors are made up")
    t = torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="cpu", requires_grad=False)
    if t.is_floating_point() or t.is_complex():
        t.uniform_(0.5, 1.5)
    else:
        t.zero_()
    return t


def _signature(func, args, kwargs) -> tuple:
    def leaf(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return ("T", tuple(v.shape), tuple(v.stride()), v.dtype)
        if isinstance(v, (int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout,
                          torch.memory_format)):
            return v
        return type(v).__name__

    return (func, tuple(leaf(v) for v in tree_flatten((args, kwargs))[0]))
