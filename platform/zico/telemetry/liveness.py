"""Lost-worker detection: a device whose heartbeat key stops changing for ``lost_after_s`` is declared lost;
and the backstop of the profiling time limit: a job still profiling at twice the limit is failed.

Note [Heartbeats without clock skew]
    Workers refresh ``zico:worker:<dev>:heartbeat`` every second with a new value. The consumer does not
    compare the worker's clock with its own; it records, on its *own* monotonic clock, when it last saw the
    value change. A device is lost when that is more than ``lost_after_s`` ago (default
    ``settings.ZICO_WORKER_LOST_AFTER_S``, 15 s, so lost jobs are requeued well within a minute). When
    the consumer itself could not reach Redis, every device gets a fresh grace period on reconnect, so a
    Redis outage never reads as a dead worker.
    The jobs of a lost device are the ones placed or running there and the ones it was profiling
    (``Job.profiling_device``); all go back to the queue (:func:`zico.jobs.lifecycle.lose`).

Note [A lost device comes back]
    A device declared lost is set offline, but its heartbeat key is still read. When its value changes
    again (the worker was stalled, not dead, or its link came back), the device and its node are set
    online again and the consumer pushes its budget as for any online device. A worker that restarts
    sends ``worker_up``, which sets the device online as well (zico.telemetry.handlers.on_worker_up).
"""
from __future__ import annotations

import logging
import time

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from zico.cluster.models import Device, Node, Status
from zico.jobs.models import Job
from zico.jobs import lifecycle
from zico.jobs.transitions import JobStatus as S
from zico_contracts import keys


log = logging.getLogger(__name__)


class Liveness:
    """Tracks heartbeats of registered devices and declares lost the ones that stop (see the Note)."""

    def __init__(self, lost_after_s: float | None = None, clock=time.monotonic):
        self.lost_after_s = float(lost_after_s or settings.ZICO_WORKER_LOST_AFTER_S)
        self.clock = clock
        self._seen: dict[str, tuple[bytes | None, float]] = {}  # dev -> (last value, when it changed)
        self._down: set[str] = set()

    def grace(self) -> None:
        """Restart every device's timer (after the consumer's own Redis outage or start)."""
        now = self.clock()
        self._seen = {dev: (value, now) for dev, (value, _) in self._seen.items()}

    def check(self, r) -> list[str]:
        """Read every device's heartbeat; declare lost the silent ones. Returns the devices declared lost."""
        now = self.clock()
        devices = {d.key: d
                   for d in Device.objects.select_related("node")}
        names = list(devices)
        values = r.mget([keys.heartbeat_key(dev) for dev in names]) if names else []
        lost = []
        for dev, value in zip(names, values):
            last_value, since = self._seen.get(dev, (None, now))
            if dev not in self._seen or value != last_value:
                first = dev not in self._seen
                self._seen[dev] = (value, now)
                if value is not None:
                    devices[dev].heartbeat(timezone.now())
                    self._down.discard(dev)
                    if not first and devices[dev].status == Status.OFFLINE:
                        self._revive(devices[dev])
                continue
            if devices[dev].status == Status.OFFLINE:
                self._down.add(dev)  # already offline (lost before this process started): nothing to declare
                continue
            if now - since > self.lost_after_s and dev not in self._down:
                self._down.add(dev)
                lost.append(dev)
                self._lose(devices[dev], now - since, r)
        return lost

    def _lose(self, dev: Device, silent_s: float, r=None) -> None:
        reason = f"no heartbeat from {dev} for {silent_s:.0f} s"
        on_it = (Q(status__in=[S.PLACED, S.RUNNING], placements__device=dev, placements__ended_at__isnull=True)
                 | Q(status=S.PROFILING, profiling_device=dev))  # a profile runs without a placement
        jobs = list(Job.objects.filter(on_it).distinct().order_by("pk"))
        log.warning("device %s lost (%s); %d job(s) affected", dev, reason, len(jobs))
        Device.objects.filter(pk=dev.pk).update(status=Status.OFFLINE)
        lifecycle.lose(dev, jobs, reason, redis_client=r)

    @staticmethod
    def _revive(dev: Device) -> None:
        """Set a lost device (and its node) online again: its heartbeat changed (Note [A lost device comes back])."""
        log.warning("device %s is back (its heartbeat changed again); online", dev)
        Device.objects.filter(pk=dev.pk, status=Status.OFFLINE).update(status=Status.ONLINE)
        Node.objects.filter(pk=dev.node_id).update(status=Status.ONLINE)
        dev.status = Status.ONLINE


def fail_overdue_profiles(r, now=None) -> list[int]:
    """Fail every job profiling for more than twice ``settings.ZICO_PROFILE_TIME_LIMIT_S`` and ask its
    worker to stop (the cancel key, read between iterations). Returns the ids of the jobs failed.

    The worker stops a run itself past the limit (Note [Profiling time limit] in workers/profiling.py);
    this catches a run whose ``profile_done`` never came: a worker stuck in one long iteration, or gone.
    """
    limit = float(settings.ZICO_PROFILE_TIME_LIMIT_S)
    now = now or timezone.now()
    overdue = list(Job.objects.filter(status=S.PROFILING,
                                      status_changed_at__lt=now - timezone.timedelta(seconds=2 * limit)))
    failed = []
    for job in overdue:
        waited = (now - job.status_changed_at).total_seconds()
        reason = (f"profiling did not finish within {waited:.0f} s: over twice the profiling time limit of "
                  f"{limit:g} s (ZICO_PROFILE_TIME_LIMIT_S)")
        if lifecycle.fail(job, reason, stop_run=r):
            log.warning("job %s: %s", job.pk, reason)
            failed.append(job.pk)
    return failed
