"""A run's compute-share measurement (``job_finished`` metrics, zico_contracts.computeshare) stored by the control
consumer with the curve of the job's kind (zico.jobs.shares; real Redis through the workers' own Link, real
PostgreSQL): combined into the newest curve, copied onto identical jobs still waiting, counted once however often
the message comes, refused when malformed or measured on another kind of device."""
import dataclasses

import pytest

from placement.compute_share import MEASURED_KEY, SHARE_KEY, ShareEstimate
from placement.curves import triangular_curve
from zico.jobs.models import Job, MemoryProfile
from zico_contracts import computeshare
from zico.jobs.lifecycle import transition

pytestmark = pytest.mark.django_db(transaction=True)

DEV = "cpu.h1.0"
GiB = 1 << 30
PARAMS = {"iterations": 40, "batch_size": 64}


def measurement(share=0.7, method="contention", device="cpu", **over):
    est = ShareEstimate(share=share, method=method, bound=1.0, iterations=20, solo_step_s=0.1, solo_from="curve",
                        compute_s=2.8, alone_s=0.0, overlap_s=2.8, neighbours_share=0.0, identical=1.0,
                        slowdown=1.4, utilisation=None, utilisation_s=0.0)
    return {**est.to_dict(), "device": device, **over}


def finish(consumer, link, job, placement, metrics):
    link.emit("job_started", job=job.pk, placement=placement.pk, resumed_from=0, iterations=40, pid=1)
    link.emit("job_finished", job=job.pk, placement=placement.pk, status="succeeded", reason="", metrics=metrics)
    link.flush()
    for _ in range(6):
        consumer.step()


@pytest.fixture
def kind(tenant, make_device):
    """Two identical jobs placed on a CPU device with the kind's CPU curve, and one identical job still queued."""
    dev = make_device()
    curve = triangular_curve(GiB, 3 * GiB, 0.1)  # device "cpu"
    placed = []
    for _ in range(2):
        job = Job.objects.create(tenant=tenant, workload="digits-cnn", params=PARAMS)
        MemoryProfile.record(job, curve)
        transition(job, "ready")
        from zico.cluster.models import Placement
        placement = Placement.objects.create(device=dev, plan={})
        placement.jobs.add(job)
        transition(job, "placed", device=dev)
        placed.append((job, placement))
    waiting = Job.objects.create(tenant=tenant, workload="digits-cnn", params=PARAMS)
    MemoryProfile.record(waiting, curve)
    return placed, waiting


def test_measurements_combine_into_the_newest_curve_of_the_kind_and_reach_the_waiting_job(consumer, link, kind):
    (a, pa), (b, pb), waiting = *kind[0], kind[1]
    finish(consumer, link, a, pa, {computeshare.METRIC: measurement(0.7)})
    finish(consumer, link, b, pb, {computeshare.METRIC: measurement(0.9, overlap_s=8.4)})
    newest = MemoryProfile.objects.filter(job__params=PARAMS).order_by("-created_at", "-id").first()
    assert newest.job_id == b.pk and newest.peak_bytes == 3 * GiB  # a new version of the kind's curve
    meta = newest.curve["meta"]
    assert [r["job"] for r in meta[MEASURED_KEY]["runs"]] == [a.pk, b.pk]
    assert meta[SHARE_KEY] == pytest.approx((0.7 * 2.8 + 0.9 * 8.4) / 11.2, abs=1e-4)  # weighted by overlap
    assert waiting.latest_profile().curve["meta"][SHARE_KEY] == meta[SHARE_KEY]
    assert Job.objects.get(pk=b.pk).status == "succeeded"


def test_a_message_seen_twice_is_counted_once(consumer, link, kind):
    (a, pa), _ = kind[0]
    finish(consumer, link, a, pa, {computeshare.METRIC: measurement(0.7)})
    rows = MemoryProfile.objects.count()
    link.emit("job_finished", job=a.pk, placement=pa.pk, status="succeeded", reason="",
              metrics={computeshare.METRIC: measurement(0.7)})
    link.flush()
    for _ in range(4):
        consumer.step()
    assert MemoryProfile.objects.count() == rows
    assert len(a.latest_profile().curve["meta"][MEASURED_KEY]["runs"]) == 1


@pytest.mark.parametrize("bad, field", [
    ({"share": 1.5}, "share"), ({"method": "guess"}, "method"), ({"device": "tpu"}, "device"),
    ({"iterations": 0}, "iterations"), ({"slowdown": -1.0}, "slowdown"),
])
def test_a_malformed_measurement_is_refused_naming_its_field_and_the_outcome_is_kept(consumer, link, kind, bad,
                                                                                       field, caplog):
    (a, pa), _ = kind[0]
    rows = MemoryProfile.objects.count()
    finish(consumer, link, a, pa, {computeshare.METRIC: measurement(**bad), "iterations_done": 40})
    assert Job.objects.get(pk=a.pk).status == "succeeded" and MemoryProfile.objects.count() == rows
    assert f"{field}: expected" in caplog.text
    with pytest.raises(computeshare.ShareError, match=f"^{field}: "):
        computeshare.validate(measurement(**bad))


def test_a_share_measured_on_another_kind_of_device_is_not_kept(consumer, link, kind):
    (a, pa), _ = kind[0]
    rows = MemoryProfile.objects.count()
    finish(consumer, link, a, pa, {computeshare.METRIC: measurement(device="cuda:0")})
    assert MemoryProfile.objects.count() == rows and SHARE_KEY not in (a.latest_profile().curve.get("meta") or {})


def test_the_wire_fields_are_the_estimates_fields_and_the_device():
    names = [f.name for f in dataclasses.fields(ShareEstimate)]
    assert list(computeshare.FIELDS) == [*names, "device"]
    with pytest.raises(computeshare.ShareError, match="^utilisation_s: missing"):
        computeshare.validate({k: v for k, v in measurement().items() if k != "utilisation_s"})
    with pytest.raises(computeshare.ShareError, match="^compute_share: expected an object"):
        computeshare.validate([0.5])
