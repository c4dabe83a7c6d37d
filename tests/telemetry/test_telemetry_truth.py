"""Figures the pages show, checked against known allocation sequences fed through the real path: the
workers' Link -> Redis -> the control consumer (downsampler, handlers) -> PostgreSQL -> the page builders
(zico.web.timelines, zico.web.job_panels) and /metrics."""
import time
from datetime import datetime, timezone as dt_timezone

import pytest
from prometheus_client.parser import text_string_to_metric_families

from workers.link import Link
from zico.jobs.models import Event, Job
from zico.telemetry.consumer import ControlConsumer
from zico.telemetry.models import TimelinePoint
from zico.web.job_panels import job_statuses
from zico.web.timelines import device_timeline, job_memory

pytestmark = pytest.mark.django_db(transaction=True)

MiB = 1 << 20
DEV = "cpu.h1.0"


@pytest.fixture
def consumer(redis_url, r):
    return ControlConsumer(redis_url, name="truth", block_ms=20)


@pytest.fixture
def link(redis_url):
    return Link(redis_url, DEV)


def _feed(link, consumer, ticks):
    """ticks: [(t, {job id: allocated bytes})]; each tick is one reporter tick (jobs then the device row,
    one t), the device row's allocated the jobs' sum. Then drain the consumer and store open seconds."""
    samples = []
    for t, per_job in ticks:
        for job, a in per_job.items():
            samples.append({"job": job, "device": DEV, "t": t, "allocated": a, "reserved": a, "iteration": 0,
                            "phase": "forward"})
        total = sum(per_job.values())
        samples.append({"job": None, "device": DEV, "t": t, "allocated": total, "reserved": max(total, 300 * MiB),
                        "device_used": 0, "budget": 342 * MiB})
    assert link.publish_samples(samples)
    for _ in range(6):
        consumer.step()
    consumer._store(consumer.downsampler.flush(time.time() + 3600))
    r = consumer.redis
    r.delete("zico:telemetry")  # the pages' live read then sees only the stored timeline


def _handover(t0, a, b):
    """Job a holds 300 MiB for the first 0.4 s of each second and frees it; job b takes 230 MiB at 0.6 s."""
    ticks = []
    for s in range(5):
        for k in range(5):
            t = t0 + s + k * 0.2
            ticks.append((t, {a: 300 * MiB if k < 2 else 0, b: 230 * MiB if k >= 3 else 0}))
    return ticks


def _stacked(tl):
    """{second: sum of the job bands} from a device_timeline answer."""
    out = {}
    for pts in tl["series"].values():
        for t, v in pts:
            out[t] = out.get(t, 0) + (v or 0)
    return out


def test_a_handover_within_a_second_stacks_to_what_the_device_held(consumer, link, tenant, make_device, make_placed_job):
    dev = make_device(budget=342 * MiB)
    a, placement = make_placed_job(tenant, dev)
    b = Job.objects.create(tenant=tenant, workload="digits-cnn", params={})
    t0 = int(time.time()) - 30
    _feed(link, consumer, _handover(t0, a.pk, b.pk))
    rows = {(p.job_id, p.second): p for p in TimelinePoint.objects.filter(device=dev)}
    # each job's own maximum is kept for its own chart ...
    assert rows[(a.pk, t0)].allocated_bytes == 300 * MiB and rows[(b.pk, t0)].allocated_bytes == 230 * MiB
    # ... but the stacked figure is the value at the device's peak instant (t0 + 0.0: a holds 300, b 0)
    assert rows[(a.pk, t0)].allocated_at_peak_bytes == 300 * MiB
    assert rows[(b.pk, t0)].allocated_at_peak_bytes == 0
    tl = device_timeline(dev, None, window_s=300, now_s=t0 + 40)
    stacked = _stacked(tl)
    pool = {p[0]: p for p in tl["pool"]}
    assert set(stacked) == set(range(t0, t0 + 5))
    for second, total in stacked.items():
        assert total == 300 * MiB                      # not 530 MiB (the sum of the per-second maxima)
        assert total <= pool[second][1] <= pool[second][2] <= 342 * MiB


def test_wide_buckets_are_clipped_to_the_pool_and_a_finished_jobs_band_ends(consumer, link, tenant, make_device,
                                                                            make_placed_job):
    dev = make_device(budget=342 * MiB)
    a, placement = make_placed_job(tenant, dev)
    b = Job.objects.create(tenant=tenant, workload="digits-cnn", params={})
    t0 = (int(time.time()) - 120) // 6 * 6
    # a holds 300 MiB in seconds 0-2 of a 6 s bucket, b 230 MiB in seconds 3-5: never both at once
    ticks = [(t0 + s + k * 0.2, {a.pk: 300 * MiB if s < 3 else 0, b.pk: 230 * MiB if s >= 3 else 0})
             for s in range(6) for k in range(5)]
    _feed(link, consumer, ticks)
    Job.objects.filter(pk=a.pk).update(status="succeeded",
                                       finished_at=datetime.fromtimestamp(t0 + 2.5, tz=dt_timezone.utc))
    tl = device_timeline(dev, None, window_s=3600, now_s=t0 + 130)   # 6 s buckets
    pool = {p[0]: p for p in tl["pool"]}
    for second, total in _stacked(tl).items():
        assert total <= pool.get(second, [0, 300 * MiB])[1]        # a bucket never stacks above the pool
    a_band = tl["series"][str(a.pk)]
    assert a_band[-1][1] == 0 and a_band[-1][0] <= t0 + 6 + 1       # ends with a zero at the job's finish
    tl1 = device_timeline(dev, None, window_s=300, now_s=t0 + 130)   # 1 s points
    a1 = tl1["series"][str(a.pk)]
    assert max(t for t, _ in a1) == t0 + 3 and a1[-1][1] == 0       # nothing after its finish, then 0
    assert tl1["jobs"][str(a.pk)]["finished"] == pytest.approx(t0 + 2.5)


def test_job_peaks_come_from_the_allocator_figures_and_the_stored_timeline(consumer, link, tenant, make_device,
                                                                         make_placed_job):
    dev = make_device()
    job, _ = make_placed_job(tenant, dev)
    t0 = int(time.time()) - 20
    # the shared pool: this job allocates up to 192 MiB but its own requests obtained only 68 MiB
    _feed(link, consumer, [(t0 + k * 0.2, {job.pk: (k + 1) * 16 * MiB}) for k in range(12)])
    TimelinePoint.objects.filter(job=job).update(reserved_bytes=68 * MiB)
    [s] = job_statuses([job])
    assert (s["peak_allocated_bytes"], s["peak_reserved_bytes"]) == (192 * MiB, 68 * MiB)  # running: stored
    m = job_memory(job, "job", now_s=t0 + 30)
    assert m["summary"]["peak_allocated_bytes"] == 192 * MiB and m["summary"]["peak_reserved_bytes"] == 68 * MiB
    assert m["range"][0] == pytest.approx(job.created_at.timestamp())   # the job's own span
    link.emit("job_finished", job=job.pk, status="succeeded", reason="",
              metrics={"peak_allocated_bytes": 200 * MiB, "peak_reserved_bytes": 70 * MiB, "iterations_per_s": 3.0})
    link.flush()
    for _ in range(4):
        consumer.step()
    job.refresh_from_db()
    [s] = job_statuses([job])
    assert (s["peak_allocated_bytes"], s["peak_reserved_bytes"]) == (200 * MiB, 70 * MiB)  # the allocator's


def test_progress_gives_live_throughput_eta_and_queue_positions(consumer, link, tenant, make_device, make_placed_job):
    dev = make_device()
    job, _ = make_placed_job(tenant, dev)
    Job.objects.filter(pk=job.pk).update(status="running", total_iterations=100)
    link.emit("job_progress", job=job.pk, iteration=40, iterations=100, iterations_per_s=4.0)
    link.flush()
    for _ in range(4):
        consumer.step()
    job.refresh_from_db()
    queued = [Job.objects.create(tenant=tenant, workload="digits-cnn", params={}, priority=p) for p in (0, 5, 0)]
    statuses = {s["id"]: s for s in job_statuses([job, *queued])}
    assert statuses[job.pk]["iterations_per_s"] == 4.0
    assert statuses[job.pk]["eta_s"] == pytest.approx(60 / 4.0)
    assert [statuses[q.pk]["queue_position"] for q in queued] == [2, 1, 3]  # priority first, then submission


def _metric(client, name):
    for fam in text_string_to_metric_families(client.get("/metrics").content.decode()):
        for s in fam.samples:
            if s.name == name:
                return s.value
    raise AssertionError(f"{name} not exported")


def test_oom_prevented_reports_become_events_and_the_metric_counts_them(consumer, link, tenant, make_device,
                                                                        make_placed_job, client):
    dev = make_device()
    job, _ = make_placed_job(tenant, dev)
    from django.contrib.auth import get_user_model
    client.force_login(get_user_model().objects.create_user("ops", is_staff=True))
    assert _metric(client, "zico_oom_prevented_total") == 0
    link.emit("oom_prevented", job=job.pk, count=3, overruns=0, waited_s=0.4)
    link.emit("oom_prevented", job=job.pk, count=2, overruns=1, waited_s=0.1)
    link.flush()
    for _ in range(4):
        consumer.step()
    evs = Event.objects.filter(kind=Event.Kind.OOM_PREVENTED, job=job)
    assert sorted(e.details["count"] for e in evs) == [2, 3] and all(e.device_id == dev.pk for e in evs)
    assert _metric(client, "zico_oom_prevented_total") == 5
