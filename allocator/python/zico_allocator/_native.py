"""ctypes declarations of the C ABI in allocator/include/zico/zico.h, and the loaded library.

`lib()` loads libzico_core.so once (building it first if needed) with every function's argument
and result types set. Nothing here imports torch.
"""
from __future__ import annotations

import ctypes
import json
import threading

HOST = -1
UNLIMITED = 2**64 - 1

TRACE_KINDS = {
    0: "alloc", 1: "free", 2: "segment_alloc", 3: "segment_free", 4: "oom", 5: "budget_wait",
    6: "budget_overrun", 10: "iteration_start", 11: "forward", 12: "backward", 13: "optimizer",
    14: "iteration_end",
}
MARK_KINDS = {name: code for code, name in TRACE_KINDS.items() if code >= 10}


class ZicoError(RuntimeError):
    """A control call failed; the message is the allocator's own explanation."""


class TraceRecordC(ctypes.Structure):
    _fields_ = [
        ("timestamp_s", ctypes.c_double),
        ("job", ctypes.c_int64),
        ("delta_bytes", ctypes.c_int64),
        ("job_allocated_bytes", ctypes.c_int64),
        ("pool_allocated_bytes", ctypes.c_int64),
        ("pool_reserved_bytes", ctypes.c_int64),
        ("iteration", ctypes.c_int64),
        ("device", ctypes.c_int32),
        ("kind", ctypes.c_int32),
    ]


_SIGNATURES = {
    "zico_malloc": (ctypes.c_void_p, [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]),
    "zico_free": (None, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]),
    "zico_try_free": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]),
    "zico_install_host": (ctypes.c_int, [ctypes.c_int, ctypes.c_uint64]),
    "zico_is_installed": (ctypes.c_int, [ctypes.c_int]),
    "zico_config_error": (ctypes.c_char_p, []),
    "zico_upstream_name": (ctypes.c_char_p, [ctypes.c_int]),
    "zico_bind_thread": (ctypes.c_int, [ctypes.c_int64, ctypes.POINTER(ctypes.c_int64)]),
    "zico_thread_job": (ctypes.c_int64, []),
    "zico_bind_stream": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64)]),
    "zico_set_budget": (ctypes.c_int, [ctypes.c_int, ctypes.c_uint64]),
    "zico_get_budget": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]),
    "zico_set_budget_wait": (ctypes.c_int, [ctypes.c_int, ctypes.c_double]),
    "zico_get_budget_wait": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(ctypes.c_double)]),
    "zico_mark": (ctypes.c_int, [ctypes.c_int64, ctypes.c_int, ctypes.c_int64]),
    "zico_memory_stats_json": (ctypes.c_void_p, [ctypes.c_int, ctypes.c_int64, ctypes.c_int]),
    "zico_memory_snapshot_json": (ctypes.c_void_p, [ctypes.c_int]),
    "zico_last_oom_json": (ctypes.c_void_p, [ctypes.c_int]),
    "zico_jobs_json": (ctypes.c_void_p, [ctypes.c_int]),
    "zico_reset_peak_memory_stats": (ctypes.c_int, [ctypes.c_int]),
    "zico_empty_cache": (ctypes.c_int, [ctypes.c_int]),
    "zico_check_invariants": (ctypes.c_int, [ctypes.c_int]),
    "zico_drain_trace": (ctypes.c_size_t, [ctypes.POINTER(TraceRecordC), ctypes.c_size_t]),
    "zico_set_trace_enabled": (ctypes.c_int, [ctypes.c_int]),
    "zico_trace_dropped": (ctypes.c_uint64, []),
    "zico_agent_create": (ctypes.c_int, [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64,
                                         ctypes.POINTER(ctypes.c_void_p)]),
    "zico_agent_add_job": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_int)]),
    "zico_agent_set_job_budget": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64]),
    "zico_agent_set_job_plan": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64]),
    "zico_agent_remove_job": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64]),
    "zico_agent_set_budget": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint64]),
    "zico_agent_set_wait": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_double]),
    "zico_agent_set_yielding": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int]),
    "zico_agent_stats_json": (ctypes.c_void_p, [ctypes.c_void_p]),
    "zico_agent_destroy": (None, [ctypes.c_void_p]),
    "zico_install_agent_client": (ctypes.c_int, [ctypes.c_int]),
    "zico_install_agent_client_on": (ctypes.c_int, [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]),
    "zico_last_error": (ctypes.c_char_p, []),
    "zico_string_free": (None, [ctypes.c_void_p]),
    "zico_version": (ctypes.c_char_p, []),
}

_lock = threading.Lock()
_lib: ctypes.CDLL | None = None


def lib() -> ctypes.CDLL:
    """The loaded core library (built on first use). Raises build.BuildError if it cannot build."""
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                from . import build  # imported late: `python -m zico_allocator.build` stays warning-free

                handle = ctypes.CDLL(str(build.ensure_core()), mode=ctypes.RTLD_GLOBAL)
                for name, (restype, argtypes) in _SIGNATURES.items():
                    fn = getattr(handle, name)
                    fn.restype = restype
                    fn.argtypes = argtypes
                _lib = handle
    return _lib


def last_error() -> str:
    return (lib().zico_last_error() or b"").decode()


def config_error() -> str:
    """'' when every ZICO_* allocator knob parsed, else the allocator's message naming each malformed
    variable and its accepted forms (docs/allocator.md, knobs table)."""
    return (lib().zico_config_error() or b"").decode()


def check(rc: int) -> None:
    """Raises ZicoError with the allocator's message when a control call returned an error."""
    if rc != 0:
        raise ZicoError(last_error())


def json_call(fn_name: str, *args):
    """Calls a zico_*_json function and returns the decoded document."""
    ptr = getattr(lib(), fn_name)(*args)
    if not ptr:
        raise ZicoError(last_error())
    try:
        return json.loads(ctypes.string_at(ptr).decode())
    finally:
        lib().zico_string_free(ptr)
