"""The reporter thread of a device worker: memory samples at 5 Hz, heartbeats, budget requests, outbox flush.

Every ``SAMPLE_INTERVAL_S`` (0.2 s) it reads each running job process's figures as the device agent last got
them (the job's ``stats`` messages, 5 Hz) and the pool's (the agent pool's held chunks), plus the device's used
memory (NVML ``memory.used`` for a GPU, the resident memory of the worker and its job processes for the CPU
pool; on a GPU it also hands NVML ``utilization.gpu`` to the agent's compute meter), and publishes one sample
per job and one device sample (``job: None``) through
:class:`workers.link.Link`. Every ``HEARTBEAT_INTERVAL_S`` it refreshes the heartbeat (which also says how a
job's disk is bounded here: ``job_disk``, workers.jobdisk), applies a budget the web side asked for, reports the
OOMs the budget rule prevented (Note [OOM prevented] in workers.oom_watch), and flushes queued lifecycle
messages. It never raises: telemetry must not stop training.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any

from zico_contracts import cpushare, jobdisk, keys

from .device import DeviceRuntime
from .nvml import gpu_used_bytes, gpu_utilization, process_rss_bytes
from .oom_watch import OomWatch

log = logging.getLogger(__name__)

def collect_samples(rt: DeviceRuntime, now: float) -> list[dict[str, Any]]:
    """One sample per job process and one for the device (bytes). A job's reserved bytes are what the agent
    pool granted it (its chunks) when the pool is the agent's, else what its own pool reported."""
    runs = rt.jobs()
    samples = []
    for run in runs:
        held = rt.agent.pool.held_bytes(run.job_id)
        samples.append({"job": run.job_id, "device": rt.device, "t": now,
                        "allocated": run.allocated, "reserved": run.reserved if held is None else held,
                        "iteration": run.iteration, "iterations": run.iterations,
                        "phase": "profiling" if run.profiling else run.phase})
    st = rt.agent.pool.stats()
    if rt.config.kind == "gpu":
        used = gpu_used_bytes(rt.config.index)
        busy = gpu_utilization(rt.config.index)
        if busy is not None:  # the compute meter's reading (Note [Measured compute share] in placement.compute_share)
            rt.agent.meter.utilisation(busy)
    else:
        used = sum(filter(None, [process_rss_bytes()] + [process_rss_bytes(r.job_pid or r.pid) for r in runs if r.pid]))
    samples.append({"job": None, "device": rt.device, "t": now,
                    "allocated": st["allocated"], "reserved": st["reserved"], "peak_reserved": st["peak_reserved"],
                    "device_used": used, "budget": rt.budget_bytes, "jobs": [r.job_id for r in runs]})
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
            for report in self.oom_watch.check(rt.agent.pool.counters(), [r.job_id for r in rt.jobs()]):
                rt.link.emit("oom_prevented", **report)  # Note [OOM prevented]
            slots = getattr(rt.agent, "cpu_slots", None)  # a CPU device's share per job (zico_contracts.cpushare)
            disks = getattr(rt, "disks", None)  # which bound a job's disk has here (workers.jobdisk)
            rt.link.heartbeat({"pid": rt.pid, "jobs": [j.job_id for j in rt.jobs()], "slots": rt.config.slots,
                               "budget_bytes": rt.budget_bytes, "total_bytes": rt.info.total_bytes,
                               **({cpushare.METRIC: slots.per_job()} if slots is not None else {}),
                               **({jobdisk.METRIC: disks.describe()} if disks is not None else {})})
            wanted = rt.link.budget_request()
            if wanted is not None and wanted != rt.budget_bytes:
                if 0 < wanted <= rt.info.total_bytes:
                    rt.set_budget(wanted)
                else:
                    log.warning("ignoring budget request of %d bytes on %s (total %d)", wanted, rt.device,
                                rt.info.total_bytes)
            headroom = rt.link.gate_headroom_request()  # the device row's, like its budget
            if headroom is not None and headroom != rt.gate_headroom:
                rt.set_gate_headroom(headroom)
        rt.link.flush()
