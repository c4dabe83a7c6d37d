"""The device worker's process-wide state: which device it owns, its device agent (the pool, the coordinator and
the job processes running now, read by the reporter), and its link to Redis.

One worker process owns one device (docs/architecture.md). :func:`configure` builds the one :class:`DeviceRuntime`
at worker start (``workers.bootstrap``); tasks reach it through :func:`runtime`.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from placement.gating import DEFAULT_GATE_HEADROOM, gate_share
from zico_contracts import keys

from .link import Link
from .nvml import DeviceInfo, cpu_info, gpu_info

log = logging.getLogger(__name__)


@dataclass
class WorkerConfig:
    """How one device worker was started (see ``python -m workers.bootstrap --help``).

    Attributes:
        kind: ``"gpu"`` or ``"cpu"``.
        host: host name used in queue names and device keys.
        index: GPU index (0 for the CPU pool).
        slots: the most jobs that may share the device (Celery threads-pool concurrency: each job's
            task thread waits for its job process).
        capacity_bytes: CPU pool capacity (CPU mode; ignored for GPUs, which report NVML memory.total).
        budget_bytes: initial budget in bytes (None: the device total).
        redis_url: broker and telemetry Redis.
        checkpoint_dir: where job checkpoints go (settings ZICO_CHECKPOINT_DIR).
        data_dir: where workloads read data (settings ZICO_DATA_DIR).
        checkpoint_every_s: seconds of training between checkpoints.
        var_dir: where the device lock lives (settings VAR_DIR, ``$ZICO_VAR_DIR``).
        gate_headroom: the gate headroom a new device row is seeded with (``--gate-headroom``); None: the
            default. The row owns it, as it owns the budget: the worker registers the seed and then applies the
            row's figure (:meth:`DeviceRuntime.set_gate_headroom`, Note [One planning rule] in placement.gating).
    """

    kind: str
    host: str
    index: int
    slots: int
    capacity_bytes: int | None
    budget_bytes: int | None
    redis_url: str
    checkpoint_dir: Path
    data_dir: Path
    checkpoint_every_s: float = 5.0
    var_dir: Path | None = None
    gate_headroom: float | None = None  # seeds a new device row (worker_up); the row's figure is the one used

    @property
    def device(self) -> str:
        return keys.device_key(self.kind, self.host, self.index)

    @property
    def torch_device(self) -> str:
        """The device as torch names it in the job processes: ``cuda:<index>`` or ``cpu``."""
        return f"cuda:{self.index}" if self.kind == "gpu" else "cpu"


class DeviceRuntime:
    """State shared by the task threads and the reporter of one device worker.

    ``agent`` is the device's :class:`workers.agent.DeviceAgent` (its pool, its coordinator, the job processes it
    runs); None only in tests that need the registration alone."""

    def __init__(self, config: WorkerConfig, info: DeviceInfo, agent: Any, link: Link):
        self.config = config
        self.info = info
        self.agent = agent
        self.link = link
        self.pid = os.getpid()
        self.budget_bytes = config.budget_bytes or info.total_bytes
        self.gate_headroom = DEFAULT_GATE_HEADROOM if config.gate_headroom is None else config.gate_headroom
        self.disks = None  # workers.jobdisk.JobDisks, set at worker start; None: plain run directories

    def job_disks(self):
        """How this worker makes its jobs' run directories (workers.jobdisk.JobDisks): the one decided at worker
        start, else plain directories under the watch."""
        if self.disks is None:
            from .jobdisk import JobDisks

            var = Path(self.config.var_dir or self.config.checkpoint_dir.parent)
            disk_bytes = self.agent.settings.job_disk_bytes if self.agent is not None else 0
            self.disks = JobDisks(var / "jobs", var / "jobdisks", disk_bytes)
        return self.disks

    @property
    def device(self) -> str:
        return self.config.device

    @property
    def coordinator(self):
        """The device's coordinator (``placement.coordinator.Coordinator``), held by the agent."""
        return None if self.agent is None else self.agent.coordinator

    @property
    def torch_device(self) -> str:
        return self.config.torch_device

    def jobs(self) -> list:
        """The job processes running now (``workers.agent.JobRun``: runs and profiles)."""
        return [] if self.agent is None else self.agent.jobs()

    def set_budget(self, budget_bytes: int) -> None:
        """Apply a new device budget (bytes) to the agent's pool and the coordinator."""
        if budget_bytes == self.budget_bytes:
            return
        log.info("device %s: budget %d -> %d bytes", self.device, self.budget_bytes, budget_bytes)
        self.agent.set_budget(int(budget_bytes))
        if self.coordinator is not None:
            self.coordinator.set_budget(gate_share(self.gate_headroom) * int(budget_bytes))
        self.budget_bytes = int(budget_bytes)

    def set_gate_headroom(self, headroom: float) -> None:
        """Apply the device row's gate headroom (in [0, 1)): the coordinator plans against the rest of the
        budget (Note [One planning rule] in placement.gating). Raises ValueError outside [0, 1)."""
        share = gate_share(headroom)
        log.info("device %s: gate headroom %g -> %g", self.device, self.gate_headroom, headroom)
        self.gate_headroom = float(headroom)
        if self.coordinator is not None:
            self.coordinator.set_budget(share * self.budget_bytes)

    def registration(self) -> dict[str, Any]:
        """The ``worker_up`` message body: device facts, pid, slots, budget, and the ``--gate-headroom`` seed when
        given (budget and headroom only seed a new device row: the row's figures are the ones used)."""
        seed = {} if self.config.gate_headroom is None else {"gate_headroom": self.config.gate_headroom}
        return {**self.info.to_dict(), "host": self.config.host, "pid": self.pid,
                "slots": self.config.slots, "budget_bytes": self.budget_bytes, **seed}


_runtime: DeviceRuntime | None = None


def describe(config: WorkerConfig) -> DeviceInfo:
    """Device facts: NVML for a GPU, the configured capacity for the CPU pool. Raises DeviceInfoError."""
    if config.kind == "gpu":
        return gpu_info(config.index)
    return cpu_info(config.capacity_bytes if config.capacity_bytes is not None else 0)


def set_runtime(rt: DeviceRuntime | None) -> None:
    global _runtime
    _runtime = rt


def runtime() -> DeviceRuntime:
    """The process's device runtime. Raises RuntimeError outside a started device worker."""
    if _runtime is None:
        raise RuntimeError("no device runtime: device tasks run only in a worker started by workers.bootstrap")
    return _runtime
