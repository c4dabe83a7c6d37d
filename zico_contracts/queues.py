"""Celery queue names and routes, and device keys — the one place they are declared.

* ``control``            — web-side consumers (telemetry persistence, worker-loss checks, health).
* ``cpu.<host>``         — the CPU device worker of a host (demo, tests, CPU-only clusters).
* ``gpu.<host>.<index>`` — the worker process that owns GPU ``index`` on ``host``.

A device's key (:func:`device_key`, ``<kind>.<host>.<index>``, e.g. ``gpu.node1.0``, ``cpu.node1.0``) names it in
Redis (zico_contracts.keys) and in the worker's Celery host name.

Device tasks (run_job, profile_job) are sent with an explicit ``queue=device_queue(...)``;
control tasks are routed here by name (:mod:`zico_contracts.tasks`). Standard library only.
"""
import re

from zico_contracts.tasks import CONTROL_PREFIX

CONTROL_QUEUE = "control"

_HOST = r"[A-Za-z0-9][A-Za-z0-9_-]*"  # a host name in queue names and device keys
_HOST_RE = re.compile(rf"^{_HOST}$")


def _check_host(host: str) -> str:
    if not _HOST_RE.match(host or ""):
        raise ValueError(f"invalid host name for a queue: {host!r} (letters, digits, '-' and '_' only)")
    return host


def cpu_queue(host: str) -> str:
    """Queue of the CPU device worker on ``host``. Raises ValueError on a malformed host."""
    return f"cpu.{_check_host(host)}"


def gpu_queue(host: str, index: int) -> str:
    """Queue of the worker owning GPU ``index`` on ``host``. Raises ValueError on bad input."""
    if not isinstance(index, int) or index < 0:
        raise ValueError(f"GPU index must be a non-negative int, got {index!r}")
    return f"gpu.{_check_host(host)}.{index}"


def device_queue(kind: str, host: str, index: int) -> str:
    """Queue for a device of ``kind`` ('gpu' or 'cpu'). Raises ValueError on an unknown kind."""
    if kind == "gpu":
        return gpu_queue(host, index)
    if kind == "cpu":
        return cpu_queue(host)
    raise ValueError(f"unknown device kind {kind!r} (expected 'gpu' or 'cpu')")


_DEVICE_RE = re.compile(rf"^(gpu|cpu)\.{_HOST}\.\d+$")


def device_key(kind: str, host: str, index: int) -> str:
    """The device's name in Redis keys, e.g. ``gpu.node1.0``. Raises ValueError on bad parts."""
    key = f"{kind}.{host}.{index}"
    if not isinstance(index, int) or index < 0 or not _DEVICE_RE.match(key):
        raise ValueError(f"invalid device (kind={kind!r}, host={host!r}, index={index!r}): "
                         "kind is 'gpu' or 'cpu', host letters/digits/'-'/'_', index a non-negative int")
    return key


def parse_device_key(key: str) -> tuple[str, str, int]:
    """Inverse of :func:`device_key`: ``'gpu.node1.0'`` -> ``('gpu', 'node1', 0)``. Raises ValueError."""
    if not isinstance(key, str) or not _DEVICE_RE.match(key):
        raise ValueError(f"invalid device key {key!r} (expected '<gpu|cpu>.<host>.<index>')")
    kind, host, index = key.split(".")
    return kind, host, int(index)


# Control tasks by stable name prefix -> queue. Device tasks carry their queue explicitly.
TASK_ROUTES = {
    CONTROL_PREFIX + "*": {"queue": CONTROL_QUEUE},
}
