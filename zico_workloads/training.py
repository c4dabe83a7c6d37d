"""The training-job API the GPU workers drive: one catalog workload, one device, one iteration at a time.

    job = create_training_job("digits-cnn", {"batch_size": 64}, device="cpu", data_dir="var/data")
    for i in range(job.iterations):
        loss = job.run_iteration(i, marks)      # marks: iteration_start/phase/iteration_end
    torch.save(job.state_dict(), path)          # checkpoint; job.load_state_dict(...) resumes

Each iteration is: ``marks.iteration_start(i)``; phase ``forward`` (batch to device, forward pass and
loss, under bf16 autocast when ``precision == "bf16"``); phase ``backward``; phase ``optimizer``
(step, then gradients set to None as PyTorch does by default); ``marks.iteration_end(i)``. The
allocator trace and the coordinator locate a job by these marks.
"""
from __future__ import annotations

import contextlib
import importlib
import math
from collections import deque
from pathlib import Path
from typing import Any, Protocol

import torch

from zico_workloads.catalog import Workload, get_workload, validate_params
from zico_workloads.models import WorkloadParts

PHASES = ("forward", "backward", "optimizer")
STATE_VERSION = 1


class Marks(Protocol):
    """Receiver of iteration and phase marks (the coordinator, the allocator binding, a recorder)."""

    def iteration_start(self, i: int) -> None: ...
    def phase(self, name: str) -> None: ...
    def iteration_end(self, i: int) -> None: ...


class NullMarks:
    """Marks that go nowhere."""

    def iteration_start(self, i: int) -> None:
        pass

    def phase(self, name: str) -> None:
        pass

    def iteration_end(self, i: int) -> None:
        pass


def load_builder(workload: Workload):
    """The torch-side factory named by ``workload.builder`` (``"module:function"``; catalog-owned)."""
    module, _, attr = workload.builder.partition(":")
    return getattr(importlib.import_module(module), attr)


def build_parts(key: str, params: dict[str, Any] | None, data_dir: str | Path | None = None
                ) -> tuple[Workload, dict[str, Any], WorkloadParts]:
    """Validate params and build the workload's model and data on the CPU, initialised from
    ``params["seed"]``; the global RNG state is left as it was."""
    workload = get_workload(key)
    params = validate_params(key, params, data_dir=None)
    # Seed the initialisation without moving the process's global CPU RNG, which co-located jobs
    # in other threads draw from (devices=[]: no CUDA RNG touched, so CUDA stays uninitialised).
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(params["seed"])
        return workload, params, load_builder(workload)(params, data_dir)


def make_optimizer(params: dict[str, Any], model: torch.nn.Module, foreach: bool | None = None
                   ) -> torch.optim.Optimizer:
    """SGD with momentum 0.9, or AdamW (weight decay 0.01), at ``params["lr"]``.

    ``foreach=None`` lets PyTorch choose (the multi-tensor implementation on CUDA, the
    per-parameter loop on CPU); the estimate for a CUDA target forces True.
    """
    if params["optimizer"] == "sgd":
        return torch.optim.SGD(model.parameters(), lr=params["lr"], momentum=0.9, foreach=foreach)
    return torch.optim.AdamW(model.parameters(), lr=params["lr"], weight_decay=0.01, foreach=foreach)


def autocast_for(params: dict[str, Any], device: torch.device):
    """bf16 autocast context for ``precision == "bf16"``, else a no-op context."""
    if params["precision"] == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _to_device(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """``model.to(device)`` unless every parameter and buffer is there already (the fake-tensor
    estimate builds the model on its target device, and swapping fake tensors is refused)."""
    tensors = list(model.parameters()) + list(model.buffers())
    if all(t.device == device for t in tensors):
        return model
    return model.to(device)


class TrainingJob:
    """A catalog workload being trained on one device. Not thread-safe; one thread drives it."""

    def __init__(self, workload: Workload, params: dict[str, Any], parts: WorkloadParts, device: str,
                 optimizer_foreach: bool | None = None):
        self.workload = workload
        self.params = params
        self.device = torch.device(device)
        self.model = _to_device(parts.model, self.device).train()
        self.parts = parts
        self.optimizer = make_optimizer(params, self.model, optimizer_foreach)
        self.iterations: int = params["iterations"]
        self.iterations_done = 0
        self._losses: deque[float] = deque(maxlen=20)
        self._hits: deque[tuple[int, int]] = deque(maxlen=20)

    def run_iteration(self, i: int, marks: Marks | None = None) -> float:
        """Train on iteration ``i``'s batch; return its loss. Raises FloatingPointError on a NaN loss."""
        marks = marks or NullMarks()
        marks.iteration_start(i)
        marks.phase("forward")
        batch = {k: v.to(self.device, non_blocking=True) for k, v in self.parts.make_batch(i).items()}
        with autocast_for(self.params, self.device):
            loss, stats = self.parts.compute_loss(self.model, batch)
        del batch
        marks.phase("backward")
        loss.backward()
        marks.phase("optimizer")
        self.optimizer.step()
        self._zero_grad()
        value = self._record(i, loss.detach(), stats)
        del loss, stats
        marks.iteration_end(i)
        return value

    def _zero_grad(self) -> None:
        """Drop every gradient (``set_to_none``); the estimate overrides this to model its time."""
        self.optimizer.zero_grad(set_to_none=True)

    def _record(self, i: int, loss: torch.Tensor, stats: dict[str, torch.Tensor]) -> float:
        """Read the loss and batch accuracy back (a device sync); the estimate overrides this."""
        value = float(loss)
        if not math.isfinite(value):
            raise FloatingPointError(f"iteration {i}: loss is {value}")
        self.iterations_done = i + 1
        self._losses.append(value)
        if "correct" in stats:
            self._hits.append((int(stats["correct"]), int(stats["count"])))
        return value

    def metrics(self) -> dict[str, Any]:
        """Progress figures: iterations done, last loss, mean loss and (classifiers) accuracy
        over the last up-to-20 iterations' training batches."""
        out: dict[str, Any] = {"iterations_done": self.iterations_done, "iterations": self.iterations}
        if self._losses:
            out["loss"] = self._losses[-1]
            out["loss_avg"] = sum(self._losses) / len(self._losses)
        if self._hits:
            out["train_accuracy"] = sum(c for c, _ in self._hits) / sum(n for _, n in self._hits)
        return out

    @torch.no_grad()
    def evaluate_accuracy(self, batches: int = 10, start: int = 10**6) -> float:
        """Classifier accuracy (0..1) on ``batches`` training batches drawn from iterations
        ``start...``; the model is left in training mode. Raises TypeError for language models."""
        self.model.eval()
        try:
            correct = total = 0
            for j in range(batches):
                batch = {k: v.to(self.device) for k, v in self.parts.make_batch(start + j).items()}
                _, stats = self.parts.compute_loss(self.model, batch)
                if "correct" not in stats:
                    raise TypeError(f"{self.workload.key} is not a classifier")
                correct += int(stats["correct"])
                total += int(stats["count"])
            return correct / total
        finally:
            self.model.train()

    def state_dict(self) -> dict[str, Any]:
        """Checkpoint: workload, params, iterations done, model and optimizer state."""
        return {"version": STATE_VERSION, "workload": self.workload.key, "params": dict(self.params),
                "iterations_done": self.iterations_done, "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict`. Raises ValueError if it belongs to another job spec."""
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"checkpoint version {state.get('version')!r} is not {STATE_VERSION}")
        if state.get("workload") != self.workload.key or state.get("params") != self.params:
            raise ValueError("checkpoint was written for a different workload or params")
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.iterations_done = int(state["iterations_done"])


def create_training_job(key: str, params: dict[str, Any] | None = None, device: str = "cpu",
                        data_dir: str | Path | None = None) -> TrainingJob:
    """Validate ``params`` for catalog workload ``key`` and build the job on ``device``.

    Raises:
        UnknownWorkload, ParamsError: bad key or params (ValueError subclasses).
        RuntimeError: from torch, e.g. an unavailable device.
    """
    workload, params, parts = build_parts(key, params, data_dir)
    return TrainingJob(workload, params, parts, device)
