"""The slots of a CPU device: which slot (so which cores and how many threads) each job process of the agent gets.

Each launched job takes the lowest free slot and keeps it until its process has ended; the cores and threads
of a slot are zico_contracts.cpushare's (Note [Compute per slot] there). A GPU device has no slots here (its
jobs share the SMs by time slicing or MPS).
"""
from __future__ import annotations

import os
import threading

from zico_contracts import cpushare


class CpuSlots:
    """``slots`` slots over ``cpus`` (default: the worker's own affinity). Raises ValueError for ``slots < 1``."""

    def __init__(self, slots: int, cpus: set[int] | None = None):
        self.cpus = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
        cpushare.slot_share(self.cpus, slots, 0)  # raises ValueError naming a bad argument
        self.slots = slots
        self._held: dict[int, int] = {}  # job id -> its slot
        self._lock = threading.Lock()

    def take(self, job_id: int) -> cpushare.SlotShare:
        """The share of the lowest slot no running job holds, now held by ``job_id`` (with more jobs than slots,
        which the worker's concurrency does not allow, the slot of ``len(held) % slots``)."""
        with self._lock:
            held = set(self._held.values())
            slot = next((i for i in range(self.slots) if i not in held), len(self._held) % self.slots)
            self._held[job_id] = slot
        return cpushare.slot_share(self.cpus, self.slots, slot)

    def free(self, job_id: int) -> None:
        """``job_id``'s process has ended: its slot is free."""
        with self._lock:
            self._held.pop(job_id, None)

    def per_job(self) -> dict[str, int]:
        """``{"cores", "slots", "threads"}``: what every job of the device gets (for the device's registration)."""
        share = cpushare.slot_share(self.cpus, self.slots, 0)
        return {"cores": share.cores, "slots": self.slots, "threads": share.threads}
