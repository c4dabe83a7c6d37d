"""Device facts for registration and telemetry: NVML (nvidia-ml-py, imported as ``pynvml``) for GPUs, a
configured capacity for the CPU pool.

NVML names are used as NVML spells them: ``memory.total`` / ``memory.used`` (bytes) from
``nvmlDeviceGetMemoryInfo``, ``utilization.gpu`` from ``nvmlDeviceGetUtilizationRates``, the name from
``nvmlDeviceGetName`` and the UUID from ``nvmlDeviceGetUUID``.
NVML never creates a CUDA context, so calling it in any process is safe.
"""
from __future__ import annotations

import os
import threading
from dataclasses import asdict, dataclass

_nvml_lock = threading.Lock()
_nvml_ready = False


class DeviceInfoError(RuntimeError):
    """The device cannot be described (no NVML, bad index, bad capacity); the message says why."""


@dataclass(frozen=True)
class DeviceInfo:
    """What a worker registers: ``total_bytes`` is NVML ``memory.total`` (GPU) or the configured capacity (CPU)."""

    kind: str  # "gpu" | "cpu"
    index: int
    name: str
    uuid: str
    total_bytes: int

    def to_dict(self) -> dict:
        return asdict(self)


def _nvml():
    global _nvml_ready
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
        raise DeviceInfoError("nvidia-ml-py (pynvml) is not installed") from exc
    with _nvml_lock:
        if not _nvml_ready:
            try:
                pynvml.nvmlInit()
            except pynvml.NVMLError as exc:
                raise DeviceInfoError(f"NVML could not initialise ({exc}); is an NVIDIA driver loaded?") from exc
            _nvml_ready = True
    return pynvml


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def gpu_info(index: int) -> DeviceInfo:
    """Name, UUID and total memory (bytes) of GPU ``index`` through NVML. Raises DeviceInfoError."""
    pynvml = _nvml()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return DeviceInfo("gpu", index, _text(pynvml.nvmlDeviceGetName(handle)),
                          _text(pynvml.nvmlDeviceGetUUID(handle)), int(mem.total))
    except pynvml.NVMLError as exc:
        raise DeviceInfoError(f"NVML cannot read GPU {index}: {exc}") from exc


def gpu_minor_number(index: int) -> int:
    """The minor number of GPU ``index``'s device node (``/dev/nvidia<minor>``, NVML
    ``nvmlDeviceGetMinorNumber``). Raises DeviceInfoError."""
    pynvml = _nvml()
    try:
        return int(pynvml.nvmlDeviceGetMinorNumber(pynvml.nvmlDeviceGetHandleByIndex(index)))
    except pynvml.NVMLError as exc:
        raise DeviceInfoError(f"NVML cannot read GPU {index}: {exc}") from exc


def gpu_used_bytes(index: int) -> int | None:
    """NVML ``memory.used`` of GPU ``index`` in bytes (all processes), or None if NVML fails."""
    try:
        pynvml = _nvml()
        return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index)).used)
    except Exception:  # telemetry must never stop training
        return None


def gpu_process_used_bytes(index: int) -> dict[int, int] | None:
    """NVML used device memory (bytes) per process on GPU ``index`` (``nvmlDeviceGetComputeRunningProcesses``:
    pid -> ``usedGpuMemory``; a process NVML cannot measure, e.g. under MPS, is left out), or None if NVML fails."""
    try:
        pynvml = _nvml()
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(index))
        return {int(p.pid): int(p.usedGpuMemory) for p in procs if p.usedGpuMemory is not None}
    except Exception:  # telemetry must never stop training
        return None


def gpu_utilization(index: int) -> float | None:
    """NVML ``utilization.gpu`` of GPU ``index`` as a fraction in [0, 1] (``nvmlDeviceGetUtilizationRates``: the
    share of NVML's last sample period, 1/6 s to 1 s by product, during which a kernel ran), or None if NVML
    fails. The device agent's compute meter takes it as the utilisation of a job computing alone (Note
    [Measured compute share] in placement.compute_share)."""
    try:
        pynvml = _nvml()
        return int(pynvml.nvmlDeviceGetUtilizationRates(pynvml.nvmlDeviceGetHandleByIndex(index)).gpu) / 100.0
    except Exception:  # telemetry must never stop training
        return None


def cpu_info(capacity_bytes: int) -> DeviceInfo:
    """The host's CPU pool with a configured capacity in bytes. Raises DeviceInfoError if it is not positive."""
    if isinstance(capacity_bytes, bool) or not isinstance(capacity_bytes, int) or capacity_bytes <= 0:
        raise DeviceInfoError(f"CPU pool capacity must be a positive number of bytes, got {capacity_bytes!r}")
    return DeviceInfo("cpu", 0, f"CPU pool ({os.cpu_count()} cores)", "", capacity_bytes)


def process_rss_bytes(pid: int | None = None) -> int | None:
    """Resident set size of process ``pid`` (None: this one) in bytes (the CPU pool's stand-in for NVML
    ``memory.used``), or None when it is gone or unreadable."""
    try:
        with open(f"/proc/{pid or 'self'}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


MAX_BYTE_SIZE = 1 << 60  # 1 EiB: far beyond any device or host; bounds typos such as 1e30


def parse_bytes(text: str | int) -> int:
    """``'3GiB'``, ``'512MiB'``, ``'2e9'``, ``'1.5GB'`` or ``1024`` -> bytes, at most ``MAX_BYTE_SIZE``.

    The byte forms of every Zico knob, the same as the allocator's C++ parser (allocator/src/options.hpp):
    a non-negative number with an optional case-insensitive unit B; K/KiB, M/MiB, G/GiB, T/TiB (powers of
    1024); KB, MB, GB, TB (powers of 1000); fractions of a byte are truncated. Raises ValueError naming the
    bad text (not a size, negative, infinite or too large)."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
             "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
             "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "b": 1, "": 1}
    s = str(text).strip().lower().replace(" ", "")
    num = s.rstrip("kmgtib")
    unit = s[len(num):]
    try:
        value = float(num) * units[unit]
    except (KeyError, ValueError):
        raise ValueError(f"not a byte size: {text!r} (examples: 3GiB, 512MiB, 2e9)") from None
    if value < 0:
        raise ValueError(f"byte size must not be negative: {text!r}")
    if not value <= MAX_BYTE_SIZE:  # also inf and nan
        raise ValueError(f"byte size too large: {text!r} (at most {MAX_BYTE_SIZE:.3g} bytes)")
    return int(value)
