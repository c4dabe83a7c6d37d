"""Estimate a workload's memory curve on the CPU with fake tensors: no real memory, no GPU.

The training job runs unchanged (same model, data and loop code) under PyTorch's
``FakeTensorMode`` (tensors carry shape, dtype and device but no data), with a dispatch mode on
top that sees every operator's outputs. Each new storage is an allocation of its ``nbytes``
rounded up to the allocator's block size; a weakref finalizer records the free when the last
tensor viewing the storage dies, exactly when a real allocator would get it back. Time is a
modelled clock (:mod:`zico_workloads.curves.costs`), so the curve has the same time axis as a real
trace. The records go through the same ``trace_curve`` as an allocator trace.

Note [Estimate versus a CUDA run]
The estimate follows the code paths PyTorch takes for the *fake* device. Known differences
for a CUDA target (see docs/curves.md): scaled-dot-product attention picks flash or
memory-efficient kernels on CUDA (no materialised attention matrix), which the estimate for a
CUDA target imitates (Note [CUDA attention in the estimate]); the cuBLAS workspaces torch keeps
per thread and stream are added (Note [cuBLAS workspaces]); cuDNN's per-call workspaces
(transient) and the CUDA context (outside the allocator) are not seen (sizes: docs/curves.md). ``torch.optim`` defaults to the foreach implementation on CUDA, so a
CUDA target's estimate forces ``foreach=True`` and includes its temporaries. A CPU-only torch
cannot create fake CUDA tensors; there the fake device is the CPU. ``correction`` scales or
offsets the result per workload to absorb such differences once measured.
"""
from __future__ import annotations

import contextlib
import gc
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from placement.curves import MemoryCurve
from zico_workloads.curves.costs import DeviceCost, cost_for, tensors_in
from zico_workloads.curves.op_timing import MeasuredOpCost
from zico_workloads.curves.trace import Trace, check_iterations, trace_curve
from zico_workloads.catalog import validate_params
from zico_workloads.training import TrainingJob, build_parts

TIMINGS = ("measured", "roofline")  # a CPU target's clock (estimate_curve's ``timing``)

# PyTorch's CUDA caching allocator rounds every request up to 512 bytes (kMinBlockSize).
DEFAULT_ROUND_BYTES = 512


def round_up(n: int, to: int) -> int:
    """``n`` rounded up to a multiple of ``to`` (bytes); 0 stays 0."""
    return -(-n // to) * to if to > 1 else n


@dataclass(frozen=True)
class Correction:
    """Per-workload adjustment of an estimate: ``bytes' = scale * bytes + offset_bytes``.

    Measured once per (workload, device kind) from a real trace; see docs/curves.md.
    """

    scale: float = 1.0
    offset_bytes: float = 0.0

    def apply(self, curve: MemoryCurve) -> MemoryCurve:
        if self.scale <= 0:
            raise ValueError(f"correction scale must be positive, got {self.scale}")
        return MemoryCurve(curve.fractions, np.maximum(curve.bytes * self.scale + self.offset_bytes, 0),
                           curve.iteration_s, max(curve.persistent_bytes * self.scale + self.offset_bytes, 0),
                           curve.source, curve.device, {**curve.meta, "correction": vars(self)})


class FlashLikeAttention(TorchFunctionMode):
    """Note [CUDA attention in the estimate]
    On CUDA, ``scaled_dot_product_attention`` in training (dropout > 0) runs a flash or
    memory-efficient kernel: dropout is applied inside the kernel from an RNG seed, and neither the
    (batch, heads, seq, seq) scores nor a dropout mask are stored; the kernel saves its output and
    a (batch, heads, seq) log-sum-exp. The CPU path falls back to the math kernel whenever dropout
    > 0 and stores all of them. For a CUDA target this mode calls the function with dropout 0, so
    the CPU takes its own flash kernel, whose saved tensors match the CUDA kernels'. Dropout's
    effect on the *values* does not matter to fake tensors. A function mode is thread-local, so a
    training thread next to the estimate is unaffected.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            if len(args) > 4:
                args = (*args[:4], 0.0, *args[5:])
            else:
                kwargs = {**kwargs, "dropout_p": 0.0}
        return func(*args, **kwargs)


class SkipFakeInit(TorchFunctionMode):
    """Note [No weight initialisation in the estimate]
    A fake tensor holds no values, so initialising the model's weights (``torch.nn.init``'s
    functions, which modules' ``reset_parameters`` and transformers' ``_init_weights`` call, and
    the in-place ``normal_``/``uniform_``/``fill_``/``zero_`` they come down to) computes nothing
    the estimate reads: each such call on a fake tensor writes in place, allocates no storage the
    recorder tracks (it is off while the model is built) and returns its argument. This mode
    returns the tensor without the call (the build's CPU it saves: docs/benchmarks.md, "A cold
    estimate, second pass"). Calls on real tensors (a
    dataset cached while the model is built) run as usual, and a function mode is thread-local,
    so a model built by another thread is initialised.
    """

    _SKIPPED = frozenset({torch.Tensor.normal_, torch.Tensor.uniform_, torch.Tensor.fill_, torch.Tensor.zero_,
                          torch.nn.init.uniform_, torch.nn.init.normal_, torch.nn.init.constant_,
                          torch.nn.init.kaiming_uniform_})

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self._SKIPPED:
            tensor = args[0] if args else kwargs.get("tensor")
            if isinstance(tensor, FakeTensor):
                return tensor
        return func(*args, **kwargs)


# Operators that run on cuBLAS (or cuBLASLt) on CUDA; linear, matmul and einsum decompose to them.
_BLAS_OPS = frozenset(getattr(torch.ops.aten, name) for name in (
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "_addmm_activation"))


class MemoryRecorder(TorchDispatchMode):
    """Dispatch mode that logs storage allocations and frees against a modelled clock, and
    receives the training job's iteration/phase marks (it satisfies the ``Marks`` protocol).

    ``recording`` switches logging on (model building happens with it off).
    """

    def __init__(self, cost: DeviceCost | MeasuredOpCost, round_bytes: int = DEFAULT_ROUND_BYTES):
        super().__init__()
        self.cost = cost
        self.round_bytes = round_bytes
        self.clock = 0.0
        self.recording = False
        self.live: dict[int, int] = {}
        self.times: list[float] = []
        self.deltas: list[int] = []
        self.marks: list[tuple[float, str, int, str | None]] = []
        self._iteration = -1
        self._phase: str | None = None
        self.ops = 0
        self.forward_ops = 0  # in the current iteration
        self._blas_handles: set[str] = set()  # threads holding a cuBLAS workspace (Note [cuBLAS workspaces])

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # TorchDispatchMode wraps a subclass's __torch_dispatch__ in torch._disable_dynamo unless this
        # says False: a wrapper per operator (two thirds of them prim queries) for a mode that never
        # runs under torch.compile.
        return False

    # -- allocation tracking ---------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # prim ops (prim.device, ...) are metadata queries a fake tensor dispatches and a real one
        # does not: no kernel, no time (915 of them per tiny-lm iteration).
        if not self.recording or func.namespace == "prim":
            return out
        kwargs = kwargs or {}
        self.ops += 1
        if self._phase == "forward":
            self.forward_ops += 1
        start = self.clock
        if self.cost.blas_workspace_bytes and func.overloadpacket in _BLAS_OPS:
            self._blas_workspace(start)
        self.clock += self.cost.op_seconds(func, args, kwargs, out, self._phase)
        for t in tensors_in(out):
            self._track(t.untyped_storage(), start)
        return out

    def _track(self, storage: torch.UntypedStorage, at: float, record: bool = True) -> int:
        """Start tracking ``storage`` unless tracked; return the bytes newly counted."""
        key = id(storage)
        if key in self.live:
            return 0
        nbytes = round_up(storage.nbytes(), self.round_bytes)
        self.live[key] = nbytes
        if record:
            self.times.append(at)
            self.deltas.append(nbytes)
        weakref.finalize(storage, self._free, key)
        return nbytes

    def _blas_workspace(self, at: float) -> None:
        """Note [cuBLAS workspaces]
        On CUDA, torch gives every (cuBLAS handle, stream) pair a workspace of
        ``blas_workspace_bytes`` from the caching allocator the first time a matmul runs there, and
        keeps it (aten/src/ATen/cuda/CublasHandlePool.cpp). Handles are per thread, and the backward
        pass runs on autograd's device thread: a training job on one stream holds two workspaces,
        2 x 32 MiB on Hopper. Without them the estimate falls short of a real CUDA run's allocated
        peak by about that (H200 runs: docs/curves.md, "Known differences from a CUDA run"). The fake run has one thread, so the handle is told by phase.
        """
        handle = "autograd" if self._phase == "backward" else "main"
        if handle in self._blas_handles:
            return
        self._blas_handles.add(handle)
        self.times.append(at)
        self.deltas.append(round_up(self.cost.blas_workspace_bytes, self.round_bytes))

    @property
    def workspace_bytes(self) -> int:
        """Bytes of the cuBLAS workspaces held so far; never freed."""
        return len(self._blas_handles) * round_up(self.cost.blas_workspace_bytes, self.round_bytes)

    def adopt(self, tensors) -> int:
        """Count the storages behind ``tensors`` as already live (the model's parameters and
        buffers, built before recording) without an allocation record; return their bytes.
        In-place updates of them (the optimizer step) then allocate nothing, as on a real device."""
        return sum(self._track(t.untyped_storage(), self.clock, record=False) for t in tensors)

    def _free(self, key: int) -> None:
        nbytes = self.live.pop(key, None)
        if nbytes is not None and self.recording:
            self.times.append(self.clock)
            self.deltas.append(-nbytes)

    @property
    def live_bytes(self) -> int:
        return sum(self.live.values()) + self.workspace_bytes

    # -- marks --------------------------------------------------------------------------
    # Each mark moves the clock on by 1 ns, so an allocation right after a mark is strictly
    # later than it, as in a real trace (windows are (start, end]).
    def _mark(self, kind: str, i: int, phase: str | None) -> None:
        self.marks.append((self.clock, kind, i, phase))
        self.clock += 1e-9

    def iteration_start(self, i: int) -> None:
        self._iteration = i
        self.forward_ops = 0
        self._mark("iteration_start", i, None)

    def phase(self, name: str) -> None:
        self._phase = name
        self._mark("phase", self._iteration, name)

    def iteration_end(self, i: int) -> None:
        self._mark("iteration_end", i, None)

    def trace(self, initial_bytes: float) -> Trace:
        return Trace(np.asarray(self.times), np.asarray(self.deltas, dtype=np.float64), initial_bytes, self.marks)


def estimate_curve(key: str, params: dict[str, Any] | None = None, device: str = "cpu",
                   data_dir: str | Path | None = None, *, warmup: int = 1, steady: int = 2,
                   round_bytes: int = DEFAULT_ROUND_BYTES, cost: DeviceCost | None = None,
                   correction: Correction | None = None, timing: str = "measured") -> MemoryCurve:
    """Estimate the steady-state memory curve of catalog workload ``key`` on ``device``.

    Runs ``warmup + steady`` iterations on fake tensors; persistent bytes start with the model's
    parameters and buffers. ``device`` is the target (``"cpu"`` or ``"cuda[:N]"``; no GPU is
    needed). Takes seconds even for GPT-2 small at batch 8 x 1024 (see docs/curve-accuracy.md).
    ``correction`` defaults to the workload's ``estimate_corrections`` for the target's device type.
    ``timing`` sets a CPU target's clock: ``"measured"`` times each distinct operator call here
    (Note [Measured operator times]; closer to a real run on a quiet machine, but it follows the
    machine's load while it measures), ``"roofline"`` prices them by a few measured rates
    (``zico_workloads.curves.costs``). A CUDA target always uses the roofline of its datasheet figures.

    Raises:
        UnknownWorkload, ParamsError: bad key or params.
        ValueError: a device other than cpu or cuda[:N]; warmup or steady out of range
            (``trace.check_iterations``); a timing other than measured or roofline.
        CurveError: the run produced no usable iteration.
    """
    wall = time.perf_counter()
    check_iterations(warmup, steady)
    if timing not in TIMINGS:
        raise ValueError(f"timing: expected one of {', '.join(TIMINGS)}, got {timing!r}")
    try:
        target = torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"device: expected 'cpu' or 'cuda[:N]', got {device!r}") from exc
    if target.type not in ("cpu", "cuda"):
        raise ValueError(f"device: expected 'cpu' or 'cuda[:N]', got {device!r}")
    # A CPU-only torch cannot make even fake CUDA tensors: then the fake device is the CPU and the
    # CUDA target shows in the cost model, the rounding and the optimizer's foreach default.
    fake_device = target if target.type == "cpu" or torch.backends.cuda.is_built() else torch.device("cpu")
    if cost is None:  # real tensors: outside the fake mode (the CPU's overheads depend on the optimizer)
        base = cost_for(target, validate_params(key, params)["optimizer"])  # as build_parts validates
        cost = MeasuredOpCost(base) if target.type == "cpu" and timing == "measured" else base
    recorder = MemoryRecorder(cost, round_bytes)
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    attention = FlashLikeAttention() if target.type == "cuda" else contextlib.nullcontext()
    with _collector_paused(), fake, recorder, attention:
        with fake_device, SkipFakeInit():  # parameters are created on the fake device directly, uninitialised
            workload, params, parts = build_parts(key, params, data_dir)
        job = _FakeTrainingJob(workload, params, parts, str(fake_device), recorder,
                               optimizer_foreach=True if target.type == "cuda" else None)
        initial = recorder.adopt(list(job.model.parameters()) + list(job.model.buffers()))
        recorder.recording = True
        for i in range(warmup + steady):
            job.run_iteration(i, recorder)
        recorder.recording = False
    label = f"cuda:{target.index or 0}" if target.type == "cuda" else "cpu"
    curve = trace_curve(recorder.trace(initial), warmup=warmup, source="estimate", device=label,
                        meta={"workload": key, "params": params, "estimate_s": round(time.perf_counter() - wall, 3),
                              "ops_per_iteration": recorder.ops // (warmup + steady),
                              "forward_ops_per_iteration": recorder.forward_ops,
                              "cost_model": cost.name,
                              "blas_workspace_bytes": recorder.workspace_bytes,
                              "fake_device": str(fake_device),
                              "torch": torch.__version__})
    if correction is None and workload.estimate_corrections.get(target.type):
        correction = Correction(**workload.estimate_corrections[target.type])
    return correction.apply(curve) if correction else curve


@contextlib.contextmanager
def _collector_paused():
    """Note [No garbage collection in the estimate]
    The fake run allocates millions of small Python objects (fake tensors, their metadata, the
    fake-tensor operator cache's keys, autograd nodes), and each of CPython's collections walks them
    and the whole module graph of torch, ``torch._dynamo`` and transformers (a few percent of a cold
    estimate's CPU: docs/benchmarks.md, "A cold estimate, third pass"). Nothing in the estimate waits for a collection: a storage's free is recorded when
    reference counting drops its last tensor (``MemoryRecorder._track``), so the collector is
    paused over the run and resumed (if it was on) afterwards; cycles made meanwhile are collected
    then. Pausing it changes no figure: tests/curves/test_estimate_reference.py holds the catalog's
    cases to the code before the pause, and tests/curves/test_curve_estimate.py compares a run with
    the collector paused against one with it collecting after every allocation round.
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


class _FakeTrainingJob(TrainingJob):
    """A training job whose loss cannot be read back (fake tensors hold no data), and whose
    ``zero_grad`` and end of iteration take the modelled time the cost model gives them."""

    def __init__(self, workload, params, parts, device: str, recorder: MemoryRecorder, **kw: Any):
        super().__init__(workload, params, parts, device, **kw)
        self._recorder = recorder

    def _zero_grad(self) -> None:
        # As Optimizer.zero_grad(set_to_none=True), one parameter at a time on the modelled clock:
        # each gradient is freed (its finalizer records the free) after its share of the time.
        step = self._recorder.cost.zero_grad_s_per_param
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._recorder.clock += step
                    p.grad = None

    def _record(self, i: int, loss: torch.Tensor, stats: dict[str, torch.Tensor]) -> float:
        # After this the loop drops the loss, and with it the autograd graph: ~one node per forward
        # operator to destroy before the iteration ends (0.1-0.5 ms measured for the ResNets, GPT-2).
        self._recorder.clock += self._recorder.cost.teardown_s_per_op * self._recorder.forward_ops
        self.iterations_done = i + 1
        return float("nan")
