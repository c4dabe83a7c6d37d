"""Installing the shared allocator in a device worker and binding job threads to it.

Note [Allocator before CUDA, and never in a forked child]
    PyTorch accepts a pluggable CUDA allocator only before its first CUDA allocation, and CUDA cannot be
    initialised again in a forked child ("Cannot re-initialize CUDA in forked subprocess"). So a device
    worker (1) runs Celery's *threads* pool — tasks run in the worker process itself, nothing is forked —
    and (2) installs the allocator from Celery's ``worker_init`` signal, in the main process, before the
    consumer fetches a single task. :func:`install` records the pid it ran in, and a fork handler refuses
    to let a forked child of a CUDA worker touch the device (see ``workers.bootstrap``).
"""
from __future__ import annotations

import contextlib
import logging
import os
from typing import Iterator

log = logging.getLogger(__name__)

INSTALLED_IN_PID: int | None = None


def install(kind: str, index: int, total_bytes: int, budget_bytes: int):
    """Install the shared allocator for this process's device and return the ``zico_allocator`` module.

    CPU: ``install_cpu(capacity_bytes)`` routes CPU tensor allocations of bound threads through the pool.
    GPU: ``install_cuda(index)`` hands PyTorch the pool through ``CUDAPluggableAllocator``; must precede
    any CUDA allocation in the process. Then the device budget (bytes) is set.
    Raises RuntimeError if called twice in one process.
    """
    global INSTALLED_IN_PID
    if INSTALLED_IN_PID is not None:
        raise RuntimeError(f"the shared allocator is already installed in process {INSTALLED_IN_PID}")
    import zico_allocator

    if kind == "gpu":
        zico_allocator.install_cuda(index)
        zico_allocator.set_budget(int(budget_bytes), device=index)
    else:
        zico_allocator.install_cpu(total_bytes)
        zico_allocator.set_budget(int(budget_bytes), device="cpu")
    INSTALLED_IN_PID = os.getpid()
    log.info("shared allocator installed in pid %d for %s %d (budget %d bytes)", INSTALLED_IN_PID, kind, index,
             budget_bytes)
    return zico_allocator


@contextlib.contextmanager
def job_context(rt, job_id: int) -> Iterator[None]:
    """Bind the calling thread (CPU) or a fresh CUDA stream of its own (GPU) to ``job_id`` in the allocator,
    so every byte the job allocates is charged to it. Yields inside the binding."""
    if rt.config.kind == "gpu":
        import torch

        torch.cuda.set_device(rt.config.index)
        stream = torch.cuda.Stream(device=rt.config.index)
        with torch.cuda.stream(stream), rt.allocator.bind(job_id):
            yield
            stream.synchronize()
    else:
        with rt.allocator.bind(job_id):
            yield
