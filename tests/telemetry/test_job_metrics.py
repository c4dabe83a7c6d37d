"""A job's own figures (``zico.log``) in ``job_progress`` become stored metric points (real Redis, real PostgreSQL,
the workers' own Link): numbers only, once per message even when it is read twice, thinned past the cap."""
import pytest

from zico.telemetry import handlers
from zico.telemetry.models import MetricPoint

pytestmark = pytest.mark.django_db(transaction=True)


def drain(consumer, rounds=6):
    for _ in range(rounds):
        consumer.step()


def test_numbers_among_a_jobs_figures_are_stored_with_their_iteration(consumer, link, tenant, make_device,
                                                                      make_placed_job):
    job, placement = make_placed_job(tenant, make_device())
    link.emit("job_started", job=job.pk, placement=placement.pk, resumed_from=0, iterations=0, pid=1)
    link.emit("job_progress", job=job.pk, placement=placement.pk, iteration=3, iterations=0, iterations_per_s=1.5,
              values={"loss": 0.5, "accuracy": 1, "note": "epoch-0", "done": True, "none": None})
    link.emit("job_progress", job=job.pk, placement=placement.pk, iteration=6, iterations=0, iterations_per_s=1.5,
              values={"loss": 0.25})
    link.flush()
    drain(consumer)
    got = list(MetricPoint.objects.filter(job=job).order_by("id").values_list("name", "iteration", "value"))
    assert got == [("loss", 3, 0.5), ("accuracy", 3, 1.0), ("loss", 6, 0.25)]
    job.refresh_from_db()
    assert job.progress_iteration == 6 and job.metrics["iterations_per_s"] == 1.5


def test_a_message_stored_twice_keeps_one_value_and_bad_values_are_refused(tenant, make_device, make_placed_job):
    job, _ = make_placed_job(tenant, make_device())
    msg = {"msg": "job_progress", "t": 1000.0, "device": "cpu.h1.0", "job": job.pk, "iteration": 1,
           "values": {"loss": 2.0, "inf": float("inf"), "huge": 10**400}}
    assert handlers.store_metrics(job, msg) == 1  # a number beyond a float is not charted
    handlers.store_metrics(job, msg)  # the consumer re-reads a message it had not acked
    assert MetricPoint.objects.filter(job=job).count() == 1
    with pytest.raises(ValueError, match="values: expected an object"):
        handlers.store_metrics(job, {**msg, "values": [1, 2]})


def test_a_long_series_is_thinned_keeping_its_first_and_newest_value(tenant, make_device, make_placed_job,
                                                                      monkeypatch):
    monkeypatch.setattr(handlers, "MAX_POINTS_PER_METRIC", 10)
    job, _ = make_placed_job(tenant, make_device())
    for i in range(11):
        handlers.store_metrics(job, {"t": 1000.0 + i, "iteration": i, "values": {"loss": float(i), "lr": 0.1}})
    loss = list(MetricPoint.objects.filter(job=job, name="loss").order_by("id").values_list("iteration", flat=True))
    assert loss == [0, 2, 4, 6, 8, 10]  # every second one of the older values went; the span is whole
    assert MetricPoint.objects.filter(job=job, name="lr").count() == 6
    for i in range(11, 16):
        handlers.store_metrics(job, {"t": 1000.0 + i, "iteration": i, "values": {"loss": float(i)}})
    assert MetricPoint.objects.filter(job=job, name="loss").count() == 6  # 11 past the cap of 10: thinned again
