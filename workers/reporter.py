"""The reporter thread of a device worker: memory samples at 5 Hz, heartbeats, budget requests, outbox flush.

Every ``SAMPLE_INTERVAL_S`` (0.2 s) it reads the shared allocator's ``memory_stats`` for each running job and
for the whole pool, plus the device's used memory (NVML ``memory.used`` for a GPU, the process RSS for the
CPU pool), and publishes one sample per job and one device sample (``job: None``) through
:class:`workers.link.Link`. Every ``HEARTBEAT_INTERVAL_S`` it refreshes the heartbeat, applies a budget the
web side asked for, reports the OOMs the budget rule prevented (Note [OOM prevented] in workers.oom_watch),
and flushes queued lifecycle messages. It never raises: telemetry must not stop training.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any

from zico.telemetry import keys

from .device import DeviceRuntime
from .nvml import gpu_used_bytes, process_rss_bytes
from .oom_watch import OomWatch

log = logging.getLogger(__name__)

ALLOCATED = "allocated_bytes.all.current"
RESERVED = "reserved_bytes.all.current"


def collect_samples(rt: DeviceRuntime, now: float) -> list[dict[str, Any]]:
    """One sample per running job and one for the device, from the allocator's memory_stats (bytes)."""
    samples = []
    for js in rt.jobs():
        st = rt.allocator.memory_stats(job=js.job_id, device=rt.alloc_device)
        if js.gate is not None:
            js.gate.observe(js.job_id, int(st.get(ALLOCATED, 0)), js.phase)  # Note [Progress from memory]
        samples.append({"job": js.job_id, "device": rt.device, "t": now,
                        "allocated": int(st.get(ALLOCATED, 0)), "reserved": int(st.get(RESERVED, 0)),
                        "iteration": js.iteration, "iterations": js.iterations, "phase": js.phase})
    st = rt.allocator.memory_stats(device=rt.alloc_device)
    used = gpu_used_bytes(rt.config.index) if rt.config.kind == "gpu" else process_rss_bytes()
    samples.append({"job": None, "device": rt.device, "t": now,
                    "allocated": int(st.get(ALLOCATED, 0)), "reserved": int(st.get(RESERVED, 0)),
                    "peak_reserved": int(st.get("reserved_bytes.all.peak", 0)),
                    "device_used": used, "budget": rt.budget_bytes, "jobs": [j.job_id for j in rt.jobs()]})
    return samples


class Reporter(threading.Thread):
    """Daemon thread publishing a device worker's telemetry until :meth:`stop`."""

    def __init__(self, rt: DeviceRuntime, sample_interval_s: float = keys.SAMPLE_INTERVAL_S,
                 heartbeat_interval_s: float = keys.HEARTBEAT_INTERVAL_S):
        super().__init__(name=f"zico-reporter-{rt.device}", daemon=True)
        self.rt = rt
        self.sample_interval_s = sample_interval_s
        self.heartbeat_interval_s = heartbeat_interval_s
        self._stop_event = threading.Event()
        self.ticks = 0
        self.oom_watch = OomWatch()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop after a last flush of the outbox (so a clean shutdown loses no lifecycle message)."""
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout)
        self.rt.link.flush()

    def run(self) -> None:
        next_beat = 0.0
        while not self._stop_event.is_set():
            t0 = time.monotonic()
            try:
                self.tick(beat=t0 >= next_beat)
            except Exception:  # never let telemetry end the thread
                log.exception("reporter tick failed on %s", self.rt.device)
            if t0 >= next_beat:
                next_beat = t0 + self.heartbeat_interval_s
            self._stop_event.wait(max(0.0, self.sample_interval_s - (time.monotonic() - t0)))

    def tick(self, beat: bool = True) -> None:
        rt = self.rt
        self.ticks += 1
        rt.link.publish_samples(collect_samples(rt, time.time()))
        if beat:
            rt.link.heartbeat({"pid": rt.pid, "jobs": [j.job_id for j in rt.jobs()], "slots": rt.config.slots,
                               "budget_bytes": rt.budget_bytes, "total_bytes": rt.info.total_bytes})
            wanted = rt.link.budget_request()
            if wanted is not None and wanted != rt.budget_bytes:
                if 0 < wanted <= rt.info.total_bytes:
                    rt.set_budget(wanted)
                else:
                    log.warning("ignoring budget request of %d bytes on %s (total %d)", wanted, rt.device,
                                rt.info.total_bytes)
        rt.link.flush()
