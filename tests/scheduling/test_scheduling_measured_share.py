"""A job's compute share measured in production (Note [Measured compute share] in placement.compute_share): two
identical jobs the scheduler co-locates run as real job processes under a real device agent, whose meter
measures each run's share; their ``job_finished`` messages go through the real Link and control consumer
(real Redis, real PostgreSQL), which store the shares with the jobs' curve; the scheduler then plans the next
identical job with the stored share, not the assumed one."""
import threading
import uuid

import pytest
from django.conf import settings

from placement.compute_share import MEASURED_KEY, SHARE_KEY, combine
from zico.cluster.models import Device, Node
from zico.jobs.models import Job, MemoryProfile
from zico.scheduling.service import Scheduler
from zico.scheduling.snapshot import take_snapshot
from zico.telemetry.consumer import ControlConsumer
from zico_contracts import computeshare

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
MiB = 1 << 20
PARAMS = {"batch_size": 128, "image_size": 32, "data": "synthetic", "iterations": 24}


@pytest.fixture
def cpu_device(broker):
    node = Node.objects.create(host=f"share-{uuid.uuid4().hex[:8]}")
    dev = Device.objects.create(node=node, index=0, kind="cpu", name="CPU pool", total_bytes=1024 * MiB,
                                budget_bytes=1024 * MiB)
    yield dev
    broker.delete(dev.queue)


def _runtime(dev, tmp_path):
    """The device worker's runtime as workers.bootstrap builds it, in this process: agent, coordinator, Link."""
    from placement.coordinator import Coordinator
    from placement.gating import gate_share
    from workers.agent import DeviceAgent
    from workers.device import DeviceRuntime, WorkerConfig, cpu_info
    from workers.link import Link

    config = WorkerConfig("cpu", dev.node.host, 0, 2, dev.total_bytes, dev.budget_bytes, settings.REDIS_URL,
                          tmp_path / "ckpt", tmp_path / "data")
    agent = DeviceAgent("cpu", dev.total_bytes, dev.budget_bytes, Coordinator(gate_share(dev.gate_headroom) * dev.budget_bytes))
    rt = DeviceRuntime(config, cpu_info(dev.total_bytes), agent, Link(settings.REDIS_URL, config.device))
    return rt


def _profile(full_params):
    """The kind's real curve: its first iterations alone through the allocator's trace (as profile_job does)."""
    from tools.bench.experiment_modes import Job as BenchJob, profile

    return profile(BenchJob("digits-cnn", {k: v for k, v in full_params.items() if k != "iterations"}), "cpu",
                   512 * MiB, job_id=900_001)["curve"]


def test_a_run_beside_a_neighbour_stores_its_measured_share_and_the_scheduler_plans_with_it(
        tenant, cpu_device, queued_messages, tmp_path):
    from workers import runner
    from workers.runner import RunSpec
    from zico_workloads.catalog import validate_params

    params = validate_params("digits-cnn", PARAMS)
    first, second = (Job.objects.create(tenant=tenant, workload="digits-cnn", params=params) for _ in range(2))
    MemoryProfile.record(first, _profile(params))
    res = Scheduler().run_round()  # the second reuses the first's curve; both go on the one device, together
    assert sorted(res.placed) == sorted([first.pk, second.pk]), res
    specs = [args for task, args in queued_messages(cpu_device.queue) if task == "zico.device.run_job"]
    assert len(specs) == 2 and specs[0][1]["placement"] == specs[1][1]["placement"]
    assert all(SHARE_KEY not in (s["curve"].get("meta") or {}) for _, s in specs)  # planned with the default

    rt = _runtime(cpu_device, tmp_path)
    outs = {}
    threads = [threading.Thread(target=lambda a=args: outs.update({a[0]: runner.run(rt, RunSpec.parse(*a))}))
               for args in specs]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        rt.agent.close()
    assert {o["status"] for o in outs.values()} == {"succeeded"}, outs
    measured = {pk: o["metrics"][computeshare.METRIC] for pk, o in outs.items()}
    for m in measured.values():  # beside its identical neighbour the whole run: the step-time branch
        assert computeshare.validate(m) == m and m["identical"] > 0.5 and m["overlap_s"] > 0
        assert m["method"] in ("contention", "bound", "utilisation")

    consumer = ControlConsumer(settings.REDIS_URL, name="share", block_ms=20)
    for _ in range(20):
        consumer.step()
        if set(Job.objects.filter(pk__in=measured).values_list("status", flat=True)) == {"succeeded"}:
            break
    for _ in range(3):
        consumer.step()
    newest = MemoryProfile.objects.filter(job__in=[first, second]).order_by("-created_at", "-id").first()
    meta = newest.curve["meta"]
    runs = meta[MEASURED_KEY]["runs"]
    assert sorted(r["job"] for r in runs) == sorted(measured)
    expected = {}
    for pk in [r["job"] for r in runs]:  # the consumer's combination, in the order it stored them
        expected = combine(expected, measured[pk], job=pk, placement=specs[0][1]["placement"])
    assert meta[SHARE_KEY] == expected[SHARE_KEY]
    assert Job.objects.get(pk=first.pk).metrics[computeshare.METRIC] == measured[first.pk]  # kept with the run

    # an identical job submitted now: it copies the newest curve, and the scheduler takes its share from it
    third = Job.objects.create(tenant=tenant, workload="digits-cnn", params=params)
    Device.objects.filter(pk=cpu_device.pk).update(status="draining")  # it stays ready, in the queue
    assert third.pk in Scheduler().run_round().ready
    assert third.latest_profile().curve["meta"][SHARE_KEY] == meta[SHARE_KEY]
    queued = {j.id: j for j in take_snapshot().state.queued}
    assert queued[third.pk].compute_share == meta[SHARE_KEY]
