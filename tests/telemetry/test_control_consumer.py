"""The control consumer turns device workers' Redis messages into database rows (real Redis, real PostgreSQL).

Messages are produced by the workers' own :class:`workers.link.Link`, so the test covers both ends.
"""
import time

import pytest
from django.utils import timezone

from placement.gating import DEFAULT_GATE_HEADROOM
from workers.link import Link
from zico.cluster.models import Device
from zico.jobs.models import Event, Job
from zico.jobs.lifecycle import transition_many
from zico_contracts import keys
from zico.telemetry.consumer import ControlConsumer
from zico.telemetry.models import TelemetryGap, TimelinePoint, prune
from zico.jobs.lifecycle import transition

pytestmark = pytest.mark.django_db(transaction=True)

DEV = "cpu.h1.0"


def drain(consumer, rounds=6):
    for _ in range(rounds):
        consumer.step()


def test_worker_up_registers_the_node_and_device_with_its_budget(consumer, link, r):
    link.emit("worker_up", kind="cpu", index=0, name="CPU pool", uuid="", total_bytes=8 << 30,
              budget_bytes=6 << 30, host="h1", pid=123, slots=2, started_at=time.time())
    link.flush()
    drain(consumer)
    dev = Device.objects.get(node__host="h1", kind="cpu", index=0)
    assert (dev.total_bytes, dev.budget_bytes, dev.status) == (8 << 30, 6 << 30, "online")
    assert int(r.get(keys.budget_key(DEV))) == 6 << 30
    assert dev.gate_headroom == DEFAULT_GATE_HEADROOM  # a worker without --gate-headroom sends none: the default
    assert float(r.get(keys.gate_headroom_key(DEV))) == DEFAULT_GATE_HEADROOM  # where the worker reads the row's


@pytest.mark.parametrize("before, after", [("draining", "draining"), ("offline", "online"), ("online", "online")])
def test_a_restarted_worker_keeps_its_device_draining(consumer, link, make_device, before, after):
    dev = make_device()
    Device.objects.filter(pk=dev.pk).update(status=before)  # set by staff (draining) or by the lost-worker check
    link.emit("worker_up", kind="cpu", index=0, name="CPU pool", uuid="", total_bytes=4 << 30, pid=2,
              started_at=time.time())
    link.flush()
    drain(consumer)
    assert Device.objects.get(pk=dev.pk).status == after


def test_a_workers_gate_headroom_seeds_a_new_device_row_and_never_overwrites_it(consumer, link, r, redis_url):
    from workers.link import Link

    common = dict(kind="cpu", index=0, name="CPU pool", uuid="", total_bytes=8 << 30, budget_bytes=6 << 30,
                  pid=123, slots=2)
    links = {"h1": link, "h2": Link(redis_url, "cpu.h2.0")}

    def up(host, **extra):
        links[host].emit("worker_up", host=host, started_at=time.time(), **common, **extra)
        links[host].flush()
        drain(consumer)
        return Device.objects.get(node__host=host).gate_headroom, float(r.get(keys.gate_headroom_key(f"cpu.{host}.0")))

    assert up("h1", gate_headroom=0.2) == (0.2, 0.2)  # a new row: seeded with the worker's flag
    assert up("h1", gate_headroom=0.3) == (0.2, 0.2)  # a restart with another flag: the row's figure stays
    Device.objects.filter(node__host="h1").update(gate_headroom=0.25)  # as staff set it in the admin
    assert up("h1") == (0.25, 0.25)  # and the worker is told the row's figure
    # a seed outside [0, 1): the default, not a broken plan
    assert up("h2", gate_headroom=1.5) == (DEFAULT_GATE_HEADROOM, DEFAULT_GATE_HEADROOM)


def test_a_run_goes_running_then_succeeded_with_metrics_and_its_placement_ends(consumer, link, tenant, make_device, make_placed_job):
    dev = make_device()
    job, placement = make_placed_job(tenant, dev)
    link.emit("job_started", job=job.pk, placement=placement.pk, resumed_from=0, iterations=40, pid=1)
    link.emit("job_progress", job=job.pk, placement=placement.pk, iteration=20, iterations=40)
    link.emit("job_finished", job=job.pk, placement=placement.pk, status="succeeded", reason="",
              metrics={"iterations_per_s": 12.5, "peak_allocated_bytes": 1234, "iterations_done": 40})
    link.flush()
    drain(consumer)
    job.refresh_from_db()
    placement.refresh_from_db()
    assert job.status == "succeeded"
    assert job.metrics["iterations_per_s"] == 12.5
    assert (job.progress_iteration, job.total_iterations) == (40, 40)
    assert placement.ended_at is not None
    moves = list(Event.objects.filter(job=job, kind="status_change").order_by("time", "id")
                 .values_list("details__to", flat=True))
    assert moves[-2:] == ["running", "succeeded"]


def test_a_diverged_runs_nan_and_infinite_figures_do_not_keep_it_running(consumer, link, tenant, make_device,
                                                                          make_placed_job):
    """A training run whose loss diverged reports NaN (JSON has no NaN; PostgreSQL's jsonb refuses it): the figures
    are stored as null and the run still ends with its outcome."""
    job, placement = make_placed_job(tenant, make_device())
    link.emit("job_started", job=job.pk, placement=placement.pk, resumed_from=0, iterations=40, pid=1)
    link.emit("job_progress", job=job.pk, placement=placement.pk, iteration=20, iterations=40,
              values={"loss": float("nan"), "grad_norm": float("inf")})
    link.emit("job_finished", job=job.pk, placement=placement.pk, status="succeeded", reason="",
              metrics={"iterations_per_s": 12.5, "loss": float("nan"), "final": {"ppl": float("-inf")}})
    link.flush()
    drain(consumer)
    job.refresh_from_db()
    assert job.status == "succeeded"
    assert job.metrics["loss"] is None and job.metrics["final"] == {"ppl": None}
    assert job.metrics["iterations_per_s"] == 12.5


def test_a_runs_delay_reports_become_one_event_with_its_latest_totals(consumer, link, tenant, make_device, make_placed_job):
    job, placement = make_placed_job(tenant, make_device())
    link.emit("job_started", job=job.pk, placement=placement.pk, resumed_from=0, iterations=40, pid=1)
    link.emit("job_delay", job=job.pk, placement=placement.pk, iteration=7, delays=2, delay_s=0.3, delay_max_s=0.2,
              gate_wait_s=0.31)
    link.emit("job_delay", job=job.pk, placement=placement.pk, iteration=30, delays=5, delay_s=1.1, delay_max_s=0.4,
              gate_wait_s=1.12)
    link.flush()
    drain(consumer)
    events = list(Event.objects.filter(job=job, kind="delay"))
    assert len(events) == 1
    d = events[0].details
    assert (d["delays"], d["delay_s"], d["delay_max_s"], d["iteration"]) == (5, 1.1, 0.4, 30)


def test_a_failed_run_keeps_its_reason(consumer, link, tenant, make_device, make_placed_job):
    job, placement = make_placed_job(tenant, make_device())
    link.emit("job_started", job=job.pk, placement=placement.pk, resumed_from=0, iterations=5, pid=1)
    link.emit("job_finished", job=job.pk, placement=placement.pk, status="failed",
              reason="FloatingPointError: iteration 3: loss is nan", metrics={})
    link.flush()
    drain(consumer)
    job.refresh_from_db()
    assert job.status == "failed" and "loss is nan" in job.failure_reason


def test_a_runs_allocator_report_is_stored_as_a_sentence(consumer, link, tenant, make_device, make_placed_job):
    job, placement = make_placed_job(tenant, make_device())
    oom = {"device": -1, "reason": "budget", "timestamp_s": 1.7e9, "job": job.pk, "requested_bytes": 3 << 20,
           "rounded_bytes": 4 << 20, "job_allocated_bytes": 1 << 30, "allocated_bytes": 2 << 30,
           "reserved_bytes": 3 << 30, "budget_bytes": 3 << 30, "capacity_bytes": None, "free_cached_bytes": 0,
           "largest_free_block": 0, "detail": None}
    link.emit("job_started", job=job.pk, placement=placement.pk, resumed_from=0, iterations=5, pid=1)
    link.emit("job_finished", job=job.pk, placement=placement.pk, status="failed", metrics={},
              reason=f"OutOfMemoryError: Zico CPU pool: out of memory (allocator: {oom})")  # as workers write it
    link.flush()
    drain(consumer)
    job.refresh_from_db()
    assert job.failure_reason == (f"OutOfMemoryError: Zico CPU pool: out of memory (the allocator refused 4.00 MiB "
                                  f"for job {job.pk} on the CPU: the device budget of 3.00 GiB was reached "
                                  "(reserved 3.00 GiB, allocated 2.00 GiB, of which this job 1.00 GiB))")
    event = job.events.filter(kind=Event.Kind.STATUS_CHANGE, details__to="failed").get()
    assert event.details["reason"] == job.failure_reason


def test_a_run_of_a_stale_placement_is_aborted_and_cannot_finish_the_job(consumer, link, tenant, r, make_device, make_placed_job):
    job, placement = make_placed_job(tenant, make_device())
    stale = placement.pk + 1000
    link.emit("job_started", job=job.pk, placement=stale, resumed_from=0, iterations=5, pid=1)
    link.emit("job_finished", job=job.pk, placement=stale, status="succeeded", metrics={})
    link.flush()
    drain(consumer)
    job.refresh_from_db()
    assert job.status == "placed"
    assert r.exists(keys.abort_key(job.pk, stale))
    assert link.stop_requested(job.pk, stale) == "aborted"
    assert link.stop_requested(job.pk, placement.pk) is None


def test_samples_become_at_most_one_timeline_point_per_second_per_job(consumer, link, tenant, make_device, make_placed_job):
    dev = make_device()
    job, _ = make_placed_job(tenant, dev)
    t0 = int(time.time()) - 10
    samples = []
    for k in range(15):  # 3 s at 5 Hz
        t = t0 + k * 0.2
        samples += [{"job": job.pk, "device": DEV, "t": t, "allocated": 10 * k, "reserved": 100 + k,
                     "iteration": k, "phase": "forward"},
                    {"job": None, "device": DEV, "t": t, "allocated": 10 * k, "reserved": 500 + k,
                     "device_used": 900, "budget": 3 << 30}]
    assert link.publish_samples(samples)
    drain(consumer)
    consumer.tick()
    rows = TimelinePoint.objects.filter(device=dev)
    job_rows = list(rows.filter(job=job).order_by("second"))
    assert [p.second for p in job_rows] == [t0, t0 + 1, t0 + 2]
    assert [p.reserved_bytes for p in job_rows] == [104, 109, 114]  # the max of each second
    dev_rows = rows.filter(job__isnull=True)
    assert dev_rows.count() == 3 and dev_rows.first().budget_bytes == 3 << 30


def test_a_telemetry_gap_is_stored(consumer, link, make_device):
    make_device()
    link.emit("telemetry_gap", start=1000.0, end=1004.5)
    link.flush()
    drain(consumer)
    gap = TelemetryGap.objects.get()
    assert gap.seconds == pytest.approx(4.5)


def test_silent_worker_is_declared_lost_and_its_jobs_requeued_with_an_event(redis_url, r, link, tenant, make_device, make_placed_job):
    dev = make_device()
    job, placement = make_placed_job(tenant, dev)
    transition(job, "running", device=dev)
    consumer = ControlConsumer(redis_url, name="test", block_ms=20, lost_after_s=0.5)
    link.heartbeat({"pid": 1})
    consumer.tick()
    assert Job.objects.get(pk=job.pk).status == "running"
    time.sleep(0.7)  # no new heartbeat
    consumer.tick()
    job.refresh_from_db()
    placement.refresh_from_db()
    assert job.status == "queued" and job.lost_count == 1
    assert placement.ended_at is not None
    lost = Event.objects.get(kind="worker_lost", job=job)
    assert lost.device == dev and "no heartbeat" in lost.details["reason"]
    assert Device.objects.get(pk=dev.pk).status == "offline"


def test_a_job_lost_too_often_fails(redis_url, r, link, tenant, settings, make_device, make_placed_job):
    settings.ZICO_MAX_WORKER_LOSSES = 1
    dev = make_device()
    job, _ = make_placed_job(tenant, dev)
    consumer = ControlConsumer(redis_url, name="test", block_ms=20, lost_after_s=0.3)
    link.heartbeat({"pid": 1})
    consumer.tick()
    time.sleep(0.5)
    consumer.tick()
    job.refresh_from_db()
    assert job.status == "failed" and "worker lost 1 times" in job.failure_reason


def test_a_restarted_worker_process_strands_its_running_jobs(consumer, link, tenant, make_device, make_placed_job):
    dev = make_device()
    job, placement = make_placed_job(tenant, dev)
    transition(job, "running", device=dev)
    link.emit("worker_up", kind="cpu", index=0, name="CPU pool", uuid="", total_bytes=4 << 30, host="h1",
              pid=999, slots=2, started_at=time.time() + 1)
    link.flush()
    drain(consumer)
    job.refresh_from_db()
    assert job.status == "queued" and job.lost_count == 1


def test_cancelled_jobs_on_an_active_placement_get_a_cancel_request(consumer, link, tenant, r, make_device, make_placed_job):
    dev = make_device()
    job, _ = make_placed_job(tenant, dev)
    transition(job, "running", device=dev)
    transition(job, "cancelled")
    consumer.tick()
    assert link.stop_requested(job.pk, None) == "cancelled"


def test_budget_changes_reach_the_worker_key(consumer, r, make_device):
    dev = make_device(budget=1 << 30)
    dev.set_budget(2 << 30)
    consumer.tick()
    assert int(r.get(keys.budget_key(DEV))) == 2 << 30


def test_retention_prunes_old_points(tenant, settings, make_device):
    settings.ZICO_TIMELINE_RETENTION_S = 60
    dev = make_device()
    now = timezone.now()
    for age in (10, 120):
        t = now - timezone.timedelta(seconds=age)
        TimelinePoint.objects.create(device=dev, second=int(t.timestamp()), time=t, allocated_bytes=1,
                                     reserved_bytes=1)
    assert prune(now) == 1
    assert TimelinePoint.objects.count() == 1


def test_the_consumer_survives_its_streams_being_deleted_while_it_waits(redis_url, r, tenant, make_device):
    """FLUSHDB (or a DEL) while XREADGROUP blocks answers 'UNBLOCKED the stream key no longer exists': the consumer
    recreates its groups and keeps storing samples instead of exiting."""
    import threading

    make_device()
    consumer = ControlConsumer(redis_url, name="test-unblocked", block_ms=2000)
    consumer.step()  # groups exist; the next read blocks for up to 2 s
    errors = []

    def step():
        try:
            consumer.step()
        except Exception as exc:  # noqa: BLE001 — the assertion below names it
            errors.append(exc)

    blocked = threading.Thread(target=step)
    blocked.start()
    time.sleep(0.3)
    r.delete(keys.TELEMETRY_STREAM, keys.CONTROL_STREAM)
    blocked.join(timeout=10)
    assert not blocked.is_alive() and errors == []
    t = time.time() - 5
    Link(redis_url, DEV).publish_samples([{"job": None, "device": DEV, "t": t, "allocated": 1 << 20,
                                           "reserved": 2 << 20, "device_used": 2 << 20, "budget": 3 << 30}])
    for _ in range(10):
        consumer.step()
    consumer._store(consumer.downsampler.flush(time.time() + 60))
    assert TimelinePoint.objects.filter(device__node__host="h1", job=None, reserved_bytes=2 << 20).exists()


def test_a_workers_registration_seeds_the_device_row_with_its_gate_headroom(consumer, link, tmp_path):
    from workers.device import DeviceRuntime, WorkerConfig, cpu_info

    config = WorkerConfig("cpu", "h1", 0, 2, 8 << 30, None, "redis://unused", tmp_path, tmp_path, gate_headroom=0.2)
    runtime = DeviceRuntime(config, cpu_info(8 << 30), agent=None, link=link)
    link.emit("worker_up", started_at=time.time(), **runtime.registration())  # as workers.bootstrap sends it
    link.flush()
    drain(consumer)
    assert Device.objects.get(node__host="h1", kind="cpu", index=0).gate_headroom == 0.2
    unseeded = WorkerConfig("cpu", "h1", 0, 2, 8 << 30, None, "redis://unused", tmp_path, tmp_path)
    assert "gate_headroom" not in DeviceRuntime(unseeded, cpu_info(8 << 30), agent=None, link=link).registration()


def _profiling_job(tenant, dev):
    """A queued job moved to profiling on ``dev`` through the transition function (as a scheduling round does)."""
    job = Job.objects.create(tenant=tenant, workload="digits-cnn", params={})
    transition_many([job], "profiling", device=dev)
    assert Job.objects.get(pk=job.pk).profiling_device_id == dev.pk
    return job


def test_a_silent_workers_profiling_jobs_go_back_to_the_queue_with_an_event(redis_url, r, link, tenant, make_device):
    dev = make_device()
    other = make_device(host="h2")
    job, elsewhere = _profiling_job(tenant, dev), _profiling_job(tenant, other)
    consumer = ControlConsumer(redis_url, name="test", block_ms=20, lost_after_s=0.5)
    link.heartbeat({"pid": 1})
    r.set(keys.heartbeat_key("cpu.h2.0"), "beat 1")  # h2's worker keeps beating (the key's value changes)
    consumer.tick()
    assert Job.objects.get(pk=job.pk).status == "profiling"
    time.sleep(0.7)  # no new heartbeat from h1
    r.set(keys.heartbeat_key("cpu.h2.0"), "beat 2")
    consumer.tick()
    job.refresh_from_db()
    assert job.status == "queued" and job.lost_count == 1 and job.profiling_device_id is None
    lost = Event.objects.get(kind="worker_lost", job=job)
    assert lost.device == dev and "no heartbeat" in lost.details["reason"]
    requeued = Event.objects.filter(kind="status_change", job=job, details__to="queued").get()
    assert "while profiling" in requeued.details["reason"]
    assert Job.objects.get(pk=elsewhere.pk).status == "profiling"  # another device's profile is left alone


def test_a_restarted_worker_process_requeues_the_profile_it_was_running(consumer, link, tenant, make_device):
    dev = make_device()
    job = _profiling_job(tenant, dev)
    link.emit("worker_up", kind="cpu", index=0, name="CPU pool", uuid="", total_bytes=4 << 30, host="h1",
              pid=999, slots=2, started_at=time.time() + 1)
    link.flush()
    drain(consumer)
    job.refresh_from_db()
    assert job.status == "queued" and job.lost_count == 1
    assert "restarted (pid 999)" in Event.objects.get(kind="worker_lost", job=job).details["reason"]


def test_a_profile_started_after_the_worker_process_is_not_stranded(consumer, link, tenant, make_device):
    dev = make_device()
    link.emit("worker_up", kind="cpu", index=0, name="CPU pool", uuid="", total_bytes=4 << 30, host="h1",
              pid=999, slots=2, started_at=time.time() - 60)
    link.flush()
    drain(consumer)
    job = _profiling_job(tenant, dev)
    link.emit("worker_up", kind="cpu", index=0, name="CPU pool", uuid="", total_bytes=4 << 30, host="h1",
              pid=999, slots=2, started_at=time.time() - 60)  # the same process registering again
    link.flush()
    drain(consumer)
    assert Job.objects.get(pk=job.pk).status == "profiling"
