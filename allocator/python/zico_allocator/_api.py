"""The public functions of zico_allocator (re-exported by __init__): install, bind, budget, marks,
statistics, snapshot and trace — each a thin, argument-checking wrapper over one C call."""
from __future__ import annotations

import ctypes
import threading
from typing import NamedTuple

from . import _native
from ._native import HOST, MARK_KINDS, TRACE_KINDS, UNLIMITED, ZicoError, check, config_error, json_call, lib

_CPU_SCOPES = {"off": 0, "bound": 1, "all": 2}
_state_lock = threading.Lock()
_shim: ctypes.CDLL | None = None
_cuda_installed = False


class TraceRecord(NamedTuple):
    """One allocator event. Bytes are signed deltas or running totals; timestamp_s is epoch seconds."""

    timestamp_s: float
    job: int
    delta_bytes: int
    job_allocated_bytes: int
    pool_allocated_bytes: int
    pool_reserved_bytes: int
    iteration: int
    device: int
    kind: str  # alloc|free|segment_alloc|segment_free|oom|budget_wait|budget_overrun|<mark kind>


def _device(device) -> int:
    """Maps None / int / "cpu" / "cuda[:N]" / torch.device to the C ABI's device index."""
    if device is None:
        if _cuda_installed:
            import torch

            return torch.cuda.current_device()
        return HOST
    if isinstance(device, bool):
        raise ValueError(f"device must be an int, 'cpu', 'cuda[:N]' or a torch.device, not {device!r}")
    if isinstance(device, int):
        if not -1 <= device < 64:
            raise ValueError(f"device index must be -1 (host) or 0..63, not {device}")
        return device
    if isinstance(device, str) or hasattr(device, "type"):
        text = device if isinstance(device, str) else f"{device.type}:{device.index}" if device.index is not None else device.type
        kind, _, index = text.partition(":")
        if kind == "cpu" and not index:
            return HOST
        if kind == "cuda":
            if not index:
                return 0
            if index.isdigit() and int(index) < 64:
                return int(index)
        raise ValueError(f"cannot read device {device!r}: use 'cpu', 'cuda', 'cuda:N' or an index")
    raise ValueError(f"device must be an int, 'cpu', 'cuda[:N]' or a torch.device, not {type(device).__name__}")


def _job(job_id) -> int:
    if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id < 0:
        raise ValueError(f"job_id must be an int >= 0 (0 = unattributed), not {job_id!r}")
    return job_id


def _bytes(nbytes, name: str) -> int:
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
        raise ValueError(f"{name} must be a positive int (bytes), not {nbytes!r}")
    return nbytes


def is_installed(device=None) -> bool:
    return bool(lib().zico_is_installed(_device(device)))


def install_host_pool(device: int = HOST, capacity_bytes: int | None = None) -> None:
    """Installs a pool with the host upstream on `device` (no torch involved).

    device -1 is the CPU pool; another index gives an isolated host-backed pool standing in for a
    device (tests, simulations). capacity_bytes bounds what the upstream hands out (None: no bound,
    or ZICO_HOST_CAPACITY_BYTES). Raises ZicoError if a pool is already installed there.
    """
    cap = UNLIMITED if capacity_bytes is None else _bytes(capacity_bytes, "capacity_bytes")
    check(lib().zico_install_host(_device(device), cap))


def install_cpu(capacity_bytes: int | None = None, *, scope: str = "bound") -> None:
    """Routes torch CPU tensor allocations through the host pool (builds the CPU shim if needed).

    scope: "bound" routes threads inside bind(job) (default), "all" routes every thread (unbound
    ones charged to job 0), "off" hands everything back to torch's own CPU allocator. Calling it
    again changes the scope. Imports torch. Raises ZicoError if the host pool already exists with a
    different capacity, build.BuildError if the shim cannot build.
    """
    global _shim
    if scope not in _CPU_SCOPES:
        raise ValueError(f"scope must be one of {sorted(_CPU_SCOPES)}, not {scope!r}")
    with _state_lock:
        if not lib().zico_is_installed(HOST):
            install_host_pool(HOST, capacity_bytes)
        elif capacity_bytes is not None:
            have = memory_stats(device=HOST).get("capacity_bytes")
            if have != capacity_bytes:
                raise ZicoError(f"the host pool is already installed with capacity {have}, not {capacity_bytes}")
        if _shim is None:
            import torch  # noqa: F401  (loads libc10 before the shim that links it)

            from . import build

            shim = ctypes.CDLL(str(build.ensure_shim()), mode=ctypes.RTLD_GLOBAL)
            shim.zico_cpu_shim_install.argtypes = [ctypes.c_int]
            shim.zico_cpu_shim_set_scope.argtypes = [ctypes.c_int]
            _shim = shim
        if _shim.zico_cpu_shim_install(_CPU_SCOPES[scope]) != 0:
            raise ZicoError("the CPU shim could not install: no host pool")


def set_cpu_scope(scope: str) -> None:
    """Changes which CPU allocations the shim routes ("off", "bound", "all"); see install_cpu."""
    if scope not in _CPU_SCOPES:
        raise ValueError(f"scope must be one of {sorted(_CPU_SCOPES)}, not {scope!r}")
    if _shim is None:
        raise ZicoError("install_cpu() has not run in this process")
    _shim.zico_cpu_shim_set_scope(_CPU_SCOPES[scope])


def install_cuda(device: int = 0) -> None:
    """Makes the Zico pool torch's CUDA allocator (CUDAPluggableAllocator); run before any CUDA use.

    Imports torch. Raises ZicoError when the CUDA upstream was not built, no GPU is visible, or
    torch's CUDA allocator was already used.
    """
    global _cuda_installed
    index = _device(device)
    if index < 0:
        raise ValueError("install_cuda needs a CUDA device index >= 0")
    with _state_lock:
        if _cuda_installed:
            return
        import torch

        from . import build

        bad_knob = config_error()  # Note [Malformed knobs fail the first install] (options.hpp)
        if bad_knob:
            raise ZicoError(bad_knob)
        cuda_lib = build.cuda_library()
        if cuda_lib is None:
            raise ZicoError("the CUDA upstream was not built: no CUDA toolkit was found at build time")
        handle = ctypes.CDLL(str(cuda_lib), mode=ctypes.RTLD_GLOBAL)
        handle.zico_cuda_error.restype = ctypes.c_char_p
        count = handle.zico_cuda_register()
        if count < 0:
            raise ZicoError(f"the CUDA runtime did not start: {handle.zico_cuda_error().decode()}")
        if count <= index:
            raise ZicoError(f"CUDA device {index} is not visible to this process ({count} visible)")
        # The torch shim's entry points raise torch.OutOfMemoryError where zico_malloc returns NULL.
        shim_path = build.ensure_shim()
        ctypes.CDLL(str(shim_path), mode=ctypes.RTLD_GLOBAL)
        allocator = torch.cuda.memory.CUDAPluggableAllocator(str(shim_path), "zico_torch_cuda_malloc",
                                                             "zico_torch_cuda_free")
        try:
            torch.cuda.memory.change_current_allocator(allocator)
        except RuntimeError as exc:
            raise ZicoError(f"install_cuda must run before the first CUDA allocation: {exc}") from exc
        torch.cuda.init()  # so bind() can see the current stream from now on
        _cuda_installed = True


class bind:
    """Context manager charging allocations to `job_id`: the calling thread's (CPU) and, once the CUDA
    upstream is installed, the current CUDA stream's. Nests; restores the previous binding on exit.

    On CUDA give each job its own stream (`with torch.cuda.stream(s), bind(job):`): the backward pass
    allocates from autograd's device thread, which only the stream binding reaches. The default
    stream (handle 0) is shared by every thread, so it is never bound; there the thread binding
    applies."""

    def __init__(self, job_id: int):
        self.job_id = _job(job_id)
        self._prev_thread: int | None = None
        self._stream: int | None = None
        self._prev_stream = -1

    def __enter__(self) -> "bind":
        prev = ctypes.c_int64()
        check(lib().zico_bind_thread(self.job_id, ctypes.byref(prev)))
        self._prev_thread = prev.value
        if _cuda_installed:
            import torch

            stream = torch.cuda.current_stream().cuda_stream if torch.cuda.is_initialized() else 0
            if stream:
                self._stream = stream
                prev_s = ctypes.c_int64()
                check(lib().zico_bind_stream(self._stream, self.job_id, ctypes.byref(prev_s)))
                self._prev_stream = prev_s.value
        return self

    def __exit__(self, *exc) -> None:
        check(lib().zico_bind_thread(self._prev_thread or 0, None))
        if self._stream is not None:
            check(lib().zico_bind_stream(self._stream, self._prev_stream, None))


def set_budget(nbytes: int | None, device=None) -> None:
    """Sets the device budget in bytes (None = no budget); takes effect at once, also downwards."""
    value = UNLIMITED if nbytes is None else _bytes(nbytes, "nbytes")
    check(lib().zico_set_budget(_device(device), value))


def get_budget(device=None) -> int | None:
    out = ctypes.c_uint64()
    check(lib().zico_get_budget(_device(device), ctypes.byref(out)))
    return None if out.value == UNLIMITED else out.value


def set_budget_wait(seconds: float, device=None) -> None:
    """Bounds how long an allocation blocked by the budget waits for other jobs' frees (seconds)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= 1e6:
        raise ValueError(f"seconds must be a number in [0, 1e6], not {seconds!r}")
    check(lib().zico_set_budget_wait(_device(device), float(seconds)))


def get_budget_wait(device=None) -> float:
    out = ctypes.c_double()
    check(lib().zico_get_budget_wait(_device(device), ctypes.byref(out)))
    return out.value


def mark(job_id: int, kind: str, iteration: int) -> None:
    """Records a progress mark (iteration_start|forward|backward|optimizer|iteration_end) for a job in
    every installed pool: it goes into the trace and feeds the deadlock rule's notion of progress."""
    if kind not in MARK_KINDS:
        raise ValueError(f"kind must be one of {sorted(MARK_KINDS)}, not {kind!r}")
    if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 0:
        raise ValueError(f"iteration must be an int >= 0, not {iteration!r}")
    check(lib().zico_mark(_job(job_id), MARK_KINDS[kind], iteration))


def memory_stats(job: int | None = None, device=None) -> dict:
    """torch.cuda.memory_stats()-style dict: "<stat>.<pool>.<current|peak|allocated|freed>" in bytes or
    counts, plus num_* counters, budget_bytes and capacity_bytes (None = unlimited). With `job`, the
    job's own figures (pool "all" only; reserved_bytes = segments its requests obtained) and its
    iteration, phase and progress."""
    per_job = job is not None
    return json_call("zico_memory_stats_json", _device(device), _job(job) if per_job else 0, int(per_job))


def memory_snapshot(device=None) -> list:
    """Segments with their blocks (torch.cuda.memory_snapshot() layout, plus owner_job and job)."""
    return json_call("zico_memory_snapshot_json", _device(device))


def jobs(device=None) -> dict:
    """Per job: allocated/reserved bytes (current, peak) and each recent iteration's peak."""
    return {int(k): v for k, v in json_call("zico_jobs_json", _device(device)).items()}


def last_oom(device=None) -> dict | None:
    """The last failed allocation: reason (budget|capacity|fragmentation), job, sizes and the pool's
    figures at that moment; None if none failed."""
    report = json_call("zico_last_oom_json", _device(device))
    return None if report["reason"] is None else report


def reset_peak_memory_stats(device=None) -> None:
    check(lib().zico_reset_peak_memory_stats(_device(device)))


def empty_cache(device=None) -> None:
    """Returns every wholly free cached segment to the upstream."""
    check(lib().zico_empty_cache(_device(device)))


def check_invariants(device=None) -> None:
    """Raises ZicoError naming any broken invariant (block overlap, per-job sums, budget)."""
    check(lib().zico_check_invariants(_device(device)))


def drain_trace(max_records: int | None = None) -> list[TraceRecord]:
    """Removes and returns the buffered trace records of every pool, oldest first."""
    chunk = 4096
    buf = (_native.TraceRecordC * chunk)()
    out: list[TraceRecord] = []
    while max_records is None or len(out) < max_records:
        want = chunk if max_records is None else min(chunk, max_records - len(out))
        n = lib().zico_drain_trace(buf, want)
        out.extend(
            TraceRecord(r.timestamp_s, r.job, r.delta_bytes, r.job_allocated_bytes, r.pool_allocated_bytes,
                        r.pool_reserved_bytes, r.iteration, r.device, TRACE_KINDS.get(r.kind, str(r.kind)))
            for r in buf[:n])
        if n < want:
            break
    out.sort(key=lambda r: r.timestamp_s)
    return out
