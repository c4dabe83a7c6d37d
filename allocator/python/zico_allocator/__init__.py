"""Zico shared allocator — Python binding (ctypes; importing it does not import torch).

One pool per device serves every co-located job in the process: memory one job frees is reused by
another at once, each allocation is charged to the job bound to the calling thread (CPU) or the
current stream (CUDA), and the device budget is enforced (docs/allocator.md has the rules).

Typical use in a worker process, before any allocation of that kind:

    import zico_allocator as za
    za.install_cpu()                      # or za.install_cuda(0)
    za.set_budget(8 << 30)
    with za.bind(job_id):
        za.mark(job_id, "iteration_start", it)
        ...train...
        za.mark(job_id, "iteration_end", it)
    za.memory_stats(job=job_id)           # torch-style keys, bytes

Across processes (one job per process): the device agent holds an `AgentPool` and each job
process calls `install_agent_client()` first (see _agent.py).

Devices: None (CUDA's current device when the CUDA upstream is installed, else the host pool),
"cpu" or -1 (host pool), "cuda" / "cuda:N" / N, or a torch.device. All sizes are bytes, times seconds.
Misuse raises ValueError (bad argument) or ZicoError (the allocator refused; message says why).
"""
from __future__ import annotations

from ._agent import AGENT_FD_ENV, AgentPool, install_agent_client
from ._native import TRACE_KINDS
from ._api import (
    ZicoError,
    TraceRecord,
    bind,
    check_invariants,
    drain_trace,
    empty_cache,
    get_budget,
    get_budget_wait,
    install_cpu,
    install_cuda,
    install_host_pool,
    is_installed,
    jobs,
    last_oom,
    mark,
    memory_snapshot,
    memory_stats,
    reset_peak_memory_stats,
    set_budget,
    set_budget_wait,
    set_cpu_scope,
)

__all__ = [
    "TRACE_KINDS", "AGENT_FD_ENV", "AgentPool", "install_agent_client", "ZicoError", "TraceRecord", "bind", "check_invariants", "drain_trace", "empty_cache", "get_budget",
    "get_budget_wait", "install_cpu", "install_cuda", "install_host_pool", "is_installed", "jobs", "last_oom",
    "mark", "memory_snapshot", "memory_stats", "reset_peak_memory_stats", "set_budget", "set_budget_wait",
    "set_cpu_scope",
]
