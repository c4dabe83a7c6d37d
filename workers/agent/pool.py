"""The device's memory pool as the agent holds it.

With the allocator's agent pool (``zico_allocator.AgentPool``: memfd chunks on CPU, CUDA VMM chunks on a GPU)
the agent owns the one pool of the device: each
job process gets a socket end (:meth:`Pool.add_job`) through which its allocator client asks for chunks; the
agent enforces capacity and budget, and :meth:`Pool.remove_job` takes back every chunk a dead job held.
Without it (a GPU whose driver refuses VMM chunks) each job process installs a pool of its own,
bounded by the device budget, and the device's figures are the sum of the jobs' own (from their ``stats``
messages): the coordinator's gate keeps the sum under the budget, the per-process budgets bound each job.
"""
from __future__ import annotations

import logging
import math
import threading
from typing import Any

log = logging.getLogger(__name__)

CHUNK_BYTES = 2 << 20  # the agent pool's grant unit (2 MiB, the allocator's large-segment size)


class Pool:
    """The device's pool: the native agent pool when available (CPU), else per-process pools."""

    def __init__(self, device: str, capacity_bytes: int | None, budget_bytes: int):
        self.device = device
        self.capacity_bytes = capacity_bytes
        self.budget_bytes = int(budget_bytes)
        self.native = None
        self._lock = threading.Lock()
        self._jobs: dict[int, dict[str, int]] = {}  # per-process mode: each job's last stats (bytes)
        self._peak_reserved = 0
        self._peak_allocated = 0
        try:
            from zico_allocator import AgentPool
        except ImportError:
            AgentPool = None
        if AgentPool is not None and device == "cpu":
            self.native = AgentPool(int(capacity_bytes or budget_bytes), self.budget_bytes, CHUNK_BYTES)
        elif AgentPool is not None and device.startswith("cuda"):
            # Device memory as VMM chunks made by this process (docs/allocator.md, "On a CUDA device"); a
            # driver or GPU without the VMM API falls back to per-process pools, bounded by the device budget.
            try:
                self.native = AgentPool(int(capacity_bytes or budget_bytes), self.budget_bytes, CHUNK_BYTES,
                                        device=int(device.partition(":")[2] or 0))
            except Exception as exc:
                log.warning("no agent pool on %s (%s): each job process gets a pool of its own", device, exc)
        log.info("device pool for %s: %s", device, "agent pool" if self.native else "per-process pools")

    @property
    def shared(self) -> bool:
        """True when the jobs' chunks come from this process's one pool."""
        return self.native is not None

    def add_job(self, job_id: int, tenant_id: int = 0, budget_bytes: int | None = None) -> int | None:
        """Register a job; returns the fd of its allocator socket end (agent pool) or None. ``budget_bytes``:
        the job's own budget, which the agent pool never lets it pass (None: only the device's budget)."""
        with self._lock:
            self._jobs[job_id] = {"allocated": 0, "reserved": 0}
        if self.native is None:
            return None
        fd = self.native.add_job(job_id, tenant_id)
        if budget_bytes is not None:
            self.native.set_job_budget(job_id, int(budget_bytes))
        return fd

    def set_job_budget(self, job_id: int, budget_bytes: int | None) -> None:
        """Change ``job_id``'s own budget (bytes; None: only the device's budget holds it), as :meth:`add_job` set
        it; lifting a script's default bound once its curve is stored (zico_contracts.jobbudget). No-op without
        the agent pool (a per-process pool's budget is fixed at its launch) or once the job left."""
        if self.native is None:
            return
        try:
            self.native.set_job_budget(job_id, None if budget_bytes is None else int(budget_bytes))
        except Exception:  # the job left meanwhile
            pass

    def job_budget_refusals(self, job_id: int) -> int | None:
        """How many of ``job_id``'s allocations the agent pool refused for its own budget, finally (Note [A job's own
        budget] in the allocator's agent_server.cpp: the second refusal of a request); None without the agent
        pool or for an unknown job."""
        if self.native is None:
            return None
        job = self.native.stats()["jobs"].get(job_id)
        return None if job is None else int(job.get("over_job_budget", 0))

    def set_job_plan(self, job_id: int, planned_peak_bytes: float | None) -> None:
        """What ``job_id``'s gate plans it to hold at most (its planning curve's peak, bytes; None: not gated),
        for the agent pool's deadlock rule, which never grants a job past it (Note [Deadlock grants within a
        plan] in allocator/src/agent_server.cpp); one chunk of slack for the grant unit. No-op without the agent
        pool or once the job left."""
        if self.native is None:
            return
        plan = None if planned_peak_bytes is None else int(math.ceil(planned_peak_bytes)) + CHUNK_BYTES
        try:
            self.native.set_job_plan(job_id, plan)
        except Exception:  # the job left meanwhile
            pass

    def remove_job(self, job_id: int) -> None:
        """Forget a job; with the agent pool every chunk it held is back in the pool when this returns."""
        with self._lock:
            self._jobs.pop(job_id, None)
        if self.native is not None:
            self.native.remove_job(job_id)

    def set_budget(self, budget_bytes: int) -> None:
        self.budget_bytes = int(budget_bytes)
        if self.native is not None:
            self.native.set_budget(self.budget_bytes)

    def job_stats(self, job_id: int, allocated: int, reserved: int) -> None:
        """A job's own figures (its ``stats`` message): in per-process mode they make up the device's."""
        with self._lock:
            if job_id not in self._jobs:
                return
            self._jobs[job_id] = {"allocated": allocated, "reserved": reserved}
            self._peak_reserved = max(self._peak_reserved, sum(j["reserved"] for j in self._jobs.values()))
            self._peak_allocated = max(self._peak_allocated, sum(j["allocated"] for j in self._jobs.values()))

    def held_bytes(self, job_id: int) -> int | None:
        """Bytes the agent pool has granted ``job_id`` now (None without the agent pool or for an unknown job)."""
        if self.native is None:
            return None
        job = self.native.stats()["jobs"].get(job_id)
        return None if job is None else int(job["held_bytes"])

    def peak_held_bytes(self, job_id: int) -> int | None:
        """The most bytes the agent pool has granted ``job_id`` at once since it was added: the agent's own
        measure of the job's reserved peak (Note [A profile is what the agent measured] in workers.agent.agent);
        None without the agent pool or for an unknown job."""
        if self.native is None:
            return None
        job = self.native.stats()["jobs"].get(job_id)
        return None if job is None else int(job["peak_held_bytes"])

    def stats(self) -> dict[str, Any]:
        """Device figures in bytes: ``allocated``, ``reserved``, ``peak_allocated``, ``peak_reserved``.

        Allocated bytes are the sum of the jobs' own (their stats messages). Reserved bytes are, with the
        agent pool, the chunks it has granted (``held_bytes``, its ``peak_held_bytes``): what the budget
        bounds; with per-process pools, the sum of the jobs' reserved bytes as last reported (its peak is
        sampled at the jobs' stats rate, 5 Hz). With the agent pool also ``transfers`` / ``transfer_bytes``:
        chunks one job process returned that the agent then granted to another (reuse across processes)."""
        with self._lock:
            out = {"allocated": sum(j["allocated"] for j in self._jobs.values()),
                   "reserved": sum(j["reserved"] for j in self._jobs.values()),
                   "peak_allocated": self._peak_allocated, "peak_reserved": self._peak_reserved}
        if self.native is not None:
            pool = self.native.stats()["pool"]
            out.update(reserved=int(pool["held_bytes"]), peak_reserved=int(pool["peak_held_bytes"]),
                       transfers=int(pool["transfers"]), transfer_bytes=int(pool["transfer_bytes"]))
        return out

    def set_yielding(self, job_id: int, yielding: bool, gated: bool = False) -> None:
        """Mark a job yielding to its gated neighbours (``gated``: held back at its iteration start by the
        coordinator): while marked, a waiting neighbour may take its cached memory back (Note [Yielding jobs],
        Note [Held at the gate] in allocator/src/agent_server.cpp)."""
        if self.native is not None:
            try:
                self.native.set_yielding(job_id, yielding, gated=gated)
            except Exception:  # the job left meanwhile
                pass

    def counters(self) -> "_AgentCounters":
        """The agent pool's per-job wait and refusal counters under the allocator's names, for
        :class:`workers.oom_watch.OomWatch` (Note [OOM prevented]); empty without the agent pool."""
        return _AgentCounters(self.native)

    def reset_peaks(self) -> None:
        with self._lock:
            self._peak_reserved = self._peak_allocated = 0

    def close(self) -> None:
        if self.native is not None:
            self.native.close()
            self.native = None


class _AgentCounters:
    """``jobs()`` / ``memory_stats(job=)`` over the agent pool's ``stats()["jobs"]``: a request that waited
    (``waits``, ``wait_s``) and was then granted is an OOM prevented; ``refused`` are OOMs; ``deadlock_grants``
    overran the budget (docs/allocator.md, Note: grants, reclaim and the deadlock rule)."""

    def __init__(self, native):
        self._jobs = {} if native is None else native.stats()["jobs"]

    def jobs(self, device=None) -> dict[int, dict[str, Any]]:
        return {int(k): {"waiting": bool(v.get("waiting"))} for k, v in self._jobs.items()}

    def memory_stats(self, job: int, device=None) -> dict[str, Any]:
        v = self._jobs[job]
        return {"num_budget_waits": int(v["waits"]), "num_ooms": int(v["refused"]),
                "num_budget_overruns": int(v["deadlock_grants"]), "budget_waited_s": float(v["wait_s"])}
