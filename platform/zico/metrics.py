"""Prometheus `/metrics`: cluster figures read from the database and Redis at scrape time.

A custom collector (prometheus-client) builds every family per scrape, so gunicorn's several worker
processes all answer the same numbers without a shared multiprocess directory. Sources:

- devices: total and budget bytes (``Device``), last heartbeat (``Device.last_heartbeat``) and whether
  the worker's heartbeat key is alive in Redis (``zico_contracts.keys.heartbeat_key``);
- reserved / allocated bytes per device and allocated bytes per running job: the newest stored
  timeline point (the control consumer keeps at most one per second, so these lag by <= ~1 s);
- delays imposed, placements opened, OOMs prevented: counts of ``Event`` rows (monotonic, as counters);
- queue length: jobs waiting to be placed (queued, profiling, ready).

Access: cluster staff (session) or ``Authorization: Bearer $ZICO_METRICS_TOKEN``; others get 403,
because per-job series name every tenant's jobs.
"""
from __future__ import annotations

import hmac

import redis
from django.conf import settings
from django.db.models import Count, FloatField, IntegerField, OuterRef, Subquery, Sum
from django.db.models.functions import Cast, Coalesce
from django.db.models.fields.json import KT
from django.http import HttpResponse
from django.views.decorators.cache import never_cache
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from zico.cluster.models import Device, Placement
from zico.jobs.models import Event, Job
from zico.jobs.transitions import ALL_STATUSES, JobStatus
from zico_contracts import keys
from zico.telemetry.models import TimelinePoint

WAITING = (JobStatus.QUEUED, JobStatus.PROFILING, JobStatus.READY)
DEVICE_LABELS = ["device", "host", "kind", "index"]


def _device_labels(d: Device) -> list[str]:
    return [d.key, d.node.host, d.kind, str(d.index)]


class ZicoCollector:
    """Yields Zico's metric families; one instance per scrape (see module docstring)."""

    def collect(self):
        devices = list(Device.objects.select_related("node").annotate(
            last_reserved=Subquery(TimelinePoint.objects.filter(device=OuterRef("pk"), job__isnull=True)
                                   .order_by("-second").values("reserved_bytes")[:1]),
            last_allocated=Subquery(TimelinePoint.objects.filter(device=OuterRef("pk"), job__isnull=True)
                                    .order_by("-second").values("allocated_bytes")[:1]),
        ))
        total = GaugeMetricFamily("zico_device_total_bytes", "Device memory in bytes (NVML total, or the "
                                  "configured CPU pool capacity).", labels=DEVICE_LABELS)
        budget = GaugeMetricFamily("zico_device_budget_bytes", "Most bytes the shared allocator may reserve "
                                   "on the device.", labels=DEVICE_LABELS)
        reserved = GaugeMetricFamily("zico_device_reserved_bytes", "Bytes the device's shared pool holds "
                                     "(newest stored sample).", labels=DEVICE_LABELS)
        allocated = GaugeMetricFamily("zico_device_allocated_bytes", "Bytes of live tensors in the device's "
                                      "pool (newest stored sample).", labels=DEVICE_LABELS)
        heartbeat = GaugeMetricFamily("zico_worker_last_heartbeat_timestamp_seconds", "Unix time of the device "
                                      "worker's last heartbeat recorded in the database.", labels=DEVICE_LABELS)
        up = GaugeMetricFamily("zico_worker_up", "1 while the device worker's heartbeat key is alive in Redis.",
                               labels=DEVICE_LABELS)
        alive = self._alive_heartbeats(devices)
        for d in devices:
            lab = _device_labels(d)
            total.add_metric(lab, d.total_bytes)
            budget.add_metric(lab, d.budget_bytes)
            if d.last_reserved is not None:
                reserved.add_metric(lab, d.last_reserved)
                allocated.add_metric(lab, d.last_allocated)
            if d.last_heartbeat is not None:
                heartbeat.add_metric(lab, d.last_heartbeat.timestamp())
            if alive is not None:
                up.add_metric(lab, 1 if lab[0] in alive else 0)
        yield from (total, budget, reserved, allocated, heartbeat)
        if alive is not None:
            yield up

        job_alloc = GaugeMetricFamily("zico_job_allocated_bytes", "Bytes of live tensors of a running job "
                                      "(newest stored sample).", labels=["job", "tenant", "workload"])
        running = Job.objects.filter(status=JobStatus.RUNNING).select_related("tenant").annotate(
            last_allocated=Subquery(TimelinePoint.objects.filter(job=OuterRef("pk"))
                                    .order_by("-second").values("allocated_bytes")[:1]))
        for j in running:
            if j.last_allocated is not None:
                job_alloc.add_metric([str(j.pk), j.tenant.slug, j.workload], j.last_allocated)
        yield job_alloc

        delays = Event.objects.filter(kind=Event.Kind.DELAY)
        delay_count = CounterMetricFamily("zico_delays", "Iteration starts the coordinator held back.")
        # one Event per job run holds its totals (Note [Delays that count] in workers/gate.py)
        delay_count.add_metric([], delays.aggregate(n=Sum(Coalesce(Cast(KT("details__delays"), IntegerField()), 1)))["n"] or 0)
        yield delay_count
        delay_s = CounterMetricFamily("zico_delay_seconds", "Seconds of delay the coordinator imposed.")
        delay_s.add_metric([], delays.aggregate(s=Sum(Cast(KT("details__delay_s"), FloatField())))["s"] or 0.0)
        yield delay_s
        placements = CounterMetricFamily("zico_placements", "Placements the scheduler opened.")
        placements.add_metric([], Placement.objects.count())
        yield placements
        active = GaugeMetricFamily("zico_placements_active", "Placements currently open.")
        active.add_metric([], Placement.objects.active().count())
        yield active
        ooms = CounterMetricFamily("zico_oom_prevented", "Allocations that waited for the budget and then "
                                   "succeeded (Note [OOM prevented] in workers/oom_watch.py).")
        prevented = Event.objects.filter(kind=Event.Kind.OOM_PREVENTED)
        ooms.add_metric([], prevented.aggregate(n=Sum(Cast(KT("details__count"), IntegerField())))["n"] or 0)
        yield ooms
        queue = GaugeMetricFamily("zico_queue_length", "Jobs waiting to be placed (queued, profiling, ready).")
        queue.add_metric([], Job.objects.filter(status__in=WAITING).count())
        yield queue
        by_status = GaugeMetricFamily("zico_jobs", "Jobs by status.", labels=["status"])
        counts = dict(Job.objects.order_by().values_list("status").annotate(n=Count("id")))
        for status in ALL_STATUSES:
            by_status.add_metric([status], counts.get(status, 0))
        yield by_status

    @staticmethod
    def _alive_heartbeats(devices) -> set[str] | None:
        """Device keys whose heartbeat key exists in Redis; None when Redis cannot be reached."""
        names = [_device_labels(d)[0] for d in devices]
        if not names:
            return set()
        try:
            pipe = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1, socket_connect_timeout=1).pipeline()
            for n in names:
                pipe.exists(keys.heartbeat_key(n))
            return {n for n, present in zip(names, pipe.execute()) if present}  # one round trip for all
        except redis.RedisError:
            return None


def _authorised(request) -> bool:
    if request.user.is_authenticated and request.user.is_staff:
        return True
    token = getattr(settings, "ZICO_METRICS_TOKEN", "")
    header = request.headers.get("Authorization", "")
    return bool(token) and header.startswith("Bearer ") and hmac.compare_digest(header[7:], token)


@never_cache
def metrics_view(request):
    """Prometheus text exposition of :class:`ZicoCollector`; 403 unless staff or the metrics token."""
    if not _authorised(request):
        return HttpResponse("metrics need a staff session or the bearer token ZICO_METRICS_TOKEN\n",
                            status=403, content_type="text/plain")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ZicoCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
