"""The agent pool's Python side: `AgentPool` in the device agent process (one pool of chunks shared
by job processes) and `install_agent_client(fd)` in each job process (its host pool's segments
become chunks granted by the agent). Rules, bounds and costs: docs/allocator.md, "Agent pool".

    # device agent                                  # job process (started with pass_fds=[fd])
    pool = AgentPool(8 << 30, budget=6 << 30)       za.install_agent_client()   # reads ZICO_AGENT_FD
    fd = pool.add_job(job_id=7, tenant_id=3)        za.install_cpu(scope="all")
    subprocess.Popen(..., pass_fds=[fd],            ...train on CPU tensors...
                     env={AGENT_FD_ENV: str(fd)})
    os.close(fd); pool.stats()

All sizes are bytes, times seconds. Bad arguments raise ValueError; refusals by the native side
raise ZicoError with its message.
"""
from __future__ import annotations

import ctypes
import os

from ._native import UNLIMITED, ZicoError, check, json_call, lib

AGENT_FD_ENV = "ZICO_AGENT_FD"  # the job's socket fd, as the agent's launcher passes it


def _positive(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int (bytes), not {value!r}")
    return value


class AgentPool:
    """One pool of `capacity_bytes` (rounded down to whole chunks) shared by job processes.

    budget_bytes: the grant limit in bytes (None = the capacity is the only limit); chunk_bytes:
    the grant unit (None = ZICO_AGENT_CHUNK_BYTES, default 2 MiB; a multiple of 4096). A server
    thread in this process answers the jobs. Raises ZicoError (e.g. a malformed
    ZICO_AGENT_CHUNK_BYTES, or too few open files for one memfd per chunk).

    device: None for host memory (memfd chunks); a CUDA device index for device memory (CUDA VMM
    chunks exported as POSIX fds; needs the CUDA library and a GPU; chunk_bytes a multiple of the
    device's allocation granularity, 2 MiB on current GPUs)."""

    def __init__(self, capacity_bytes: int, budget_bytes: int | None = None, chunk_bytes: int | None = None,
                 device: int | None = None):
        self._handle = None
        cap = _positive(capacity_bytes, "capacity_bytes")
        budget = UNLIMITED if budget_bytes is None else _positive(budget_bytes, "budget_bytes")
        chunk = 0 if chunk_bytes is None else _positive(chunk_bytes, "chunk_bytes")
        handle = ctypes.c_void_p()
        if device is None:
            check(lib().zico_agent_create(cap, budget, chunk, ctypes.byref(handle)))
        else:
            cuda = _cuda_lib(device)
            if cuda.zico_agent_create_cuda(device, cap, budget, chunk, ctypes.byref(handle)) != 0:
                raise ZicoError(cuda.zico_cuda_agent_error().decode())
        self._handle = handle

    def _h(self) -> ctypes.c_void_p:
        if self._handle is None:
            raise ZicoError("this AgentPool is closed")
        return self._handle

    def add_job(self, job_id: int, tenant_id: int) -> int:
        """Registers a job (job_id > 0, tenant_id >= 0) and returns the fd of its end of the socket
        (close-on-exec; pass it with subprocess pass_fds and env AGENT_FD_ENV, then close it here).
        The job's chunks come back when that socket closes: the job exited, died, or remove_job."""
        for value, name, low in ((job_id, "job_id", 1), (tenant_id, "tenant_id", 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, not {value!r}")
        fd = ctypes.c_int(-1)
        check(lib().zico_agent_add_job(self._h(), job_id, tenant_id, ctypes.byref(fd)))
        return fd.value

    def set_job_budget(self, job_id: int, budget_bytes: int | None) -> None:
        """The most bytes ``job_id`` may hold in this pool (None: no budget of its own, only the device's).
        A request past it is refused at once, naming the budget and the job's peak (Note [A job's own budget]
        in agent_server.cpp); nothing the job process calls can change it. Raises ValueError for a budget
        that is not a positive int, ZicoError for an unknown job."""
        if budget_bytes is not None and (isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int)
                                         or budget_bytes <= 0):
            raise ValueError(f"budget_bytes must be a positive int or None, not {budget_bytes!r}")
        check(lib().zico_agent_set_job_budget(self._h(), job_id, UNLIMITED if budget_bytes is None else budget_bytes))

    def set_job_plan(self, job_id: int, plan_bytes: int | None) -> None:
        """The most bytes ``job_id``'s gate plans it to hold (None: no plan, the job is not gated): a deadlock
        grant past the budget never takes it past this, and when it is the waiter past its plan beside others
        that wait, it is the one refused (Note [Deadlock grants within a plan] in agent_server.cpp). Raises
        ValueError for a plan that is not a positive int, ZicoError for an unknown job."""
        if plan_bytes is not None and (isinstance(plan_bytes, bool) or not isinstance(plan_bytes, int)
                                       or plan_bytes <= 0):
            raise ValueError(f"plan_bytes must be a positive int or None, not {plan_bytes!r}")
        check(lib().zico_agent_set_job_plan(self._h(), job_id, UNLIMITED if plan_bytes is None else plan_bytes))

    def remove_job(self, job_id: int) -> None:
        """Disconnects the job; every chunk it held returns to the free list (its stats stay). The
        process may still map them, so each is scrubbed before its next grant, even within the tenant."""
        check(lib().zico_agent_remove_job(self._h(), job_id))

    def set_budget(self, budget_bytes: int | None) -> None:
        """The grant limit in bytes (None = none); lowering it makes jobs return cached segments."""
        value = UNLIMITED if budget_bytes is None else _positive(budget_bytes, "budget_bytes")
        check(lib().zico_agent_set_budget(self._h(), value))

    def set_yielding(self, job_id: int, yielding: bool, *, gated: bool = False) -> None:
        """Mark ``job_id`` as yielding to its coordinator's neighbours (True) or not: while marked, any waiting
        request may reclaim its cached segments (Note [Yielding jobs] in allocator/src/agent_server.cpp).
        ``gated``: it is held back at its iteration start (implies yielding); once it has returned what it can,
        a request waiting beside it is in a deadlock, granted rather than refused (Note [Held at the gate]).
        Raises ZicoError for a job this pool does not know."""
        check(lib().zico_agent_set_yielding(self._h(), int(job_id), 2 if gated else 1 if yielding else 0))

    def set_wait(self, seconds: float) -> None:
        """How long a request may wait for room before it is refused (seconds, 0..1e6)."""
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= 1e6:
            raise ValueError(f"seconds must be a number in [0, 1e6], not {seconds!r}")
        check(lib().zico_agent_set_wait(self._h(), float(seconds)))

    def stats(self) -> dict:
        """{"pool": {capacity_bytes, budget_bytes (None = none), chunk_bytes, chunks_total,
        chunks_free, held_bytes, peak_held_bytes, transfers, transfer_bytes, scrubs, deadlock_grants,
        over_budget_bytes_peak, reclaims_sent, wait_s}, "jobs": {job_id: {tenant_id, held_bytes,
        peak_held_bytes, chunks_granted, chunks_returned, waits, wait_s, refused, deadlock_grants,
        bad_messages, waiting, connected}}}. A transfer is a chunk granted to a job other than the one
        that last returned it; a scrub, one whose pages were dropped on moving to another tenant."""
        doc = json_call("zico_agent_stats_json", self._h())
        return {"pool": doc["pool"], "jobs": {j["job_id"]: j for j in doc["jobs"]}}

    def close(self) -> None:
        """Stops the server and closes every socket and chunk (jobs see their socket close)."""
        if self._handle is not None:
            lib().zico_agent_destroy(self._handle)
            self._handle = None

    def __del__(self):  # an unreferenced pool stops its server thread and closes its chunks
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may already be gone
            pass

    def __enter__(self) -> "AgentPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _cuda_lib(device) -> ctypes.CDLL:
    """libzico_cuda.so with the agent entry points' types set; ZicoError when it was not built."""
    if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device < 64:
        raise ValueError(f"device must be a CUDA device index 0..63, not {device!r}")
    from . import build

    path = build.cuda_library()
    if path is None:
        raise ZicoError("the CUDA library was not built: no CUDA toolkit was found at build time")
    cuda = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    cuda.zico_agent_create_cuda.argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64,
                                            ctypes.POINTER(ctypes.c_void_p)]
    cuda.zico_install_agent_client_cuda.argtypes = [ctypes.c_int, ctypes.c_int]
    cuda.zico_cuda_agent_error.restype = ctypes.c_char_p
    return cuda


def install_agent_client(fd: int | None = None, device: int = -1) -> None:
    """In a job process, before any allocation: the pool of `device` (-1: the host pool; N: CUDA
    device N, before its first CUDA allocation, then install_cuda(N)) takes its segments from the
    agent on `fd` (None: read env AGENT_FD_ENV). For the host, install_cpu() then routes torch's CPU
    tensors through it. Limits here (set_budget on the local pool) never raise what the agent
    grants. Raises ValueError for a missing/bad fd, ZicoError if the fd is no agent socket or the
    pool already exists."""
    if fd is None:
        text = os.environ.get(AGENT_FD_ENV, "")
        if not text.isdigit():
            raise ValueError(f"{AGENT_FD_ENV} must hold the agent socket's fd number, not {text!r}")
        fd = int(text)
    if isinstance(fd, bool) or not isinstance(fd, int) or fd < 0:
        raise ValueError(f"fd must be an int >= 0, not {fd!r}")
    if device == -1:
        check(lib().zico_install_agent_client(fd))
        return
    cuda = _cuda_lib(device)
    lib()  # the core first: the CUDA library links it
    if cuda.zico_install_agent_client_cuda(device, fd) != 0:
        raise ZicoError(cuda.zico_cuda_agent_error().decode())
