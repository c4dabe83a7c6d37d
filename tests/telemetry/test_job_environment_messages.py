"""A job's environment build as the web side sees it (real Redis, real PostgreSQL): the worker's own Link sends
``job_environment`` messages, the control consumer stores them as the job's ``metrics["environment"]``, the logs
page's progress (what ``zico logs -f`` prints) says the job is preparing, and the run's end keeps the record."""
import json
import time

import pytest
from django.test import Client

from zico.jobs.models import Job
from zico_contracts import keys
from zico_contracts.lifecycle import LifecycleError

pytestmark = pytest.mark.django_db(transaction=True)


def drain(consumer, rounds=6):
    for _ in range(rounds):
        consumer.step()


def test_a_job_is_preparing_with_the_installers_line_then_ready_and_a_bad_state_is_refused(
        consumer, link, r, tenant, make_device, make_placed_job, django_user_model):
    from zico.tenants.models import Membership

    job, placement = make_placed_job(tenant, make_device())
    user = django_user_model.objects.create_user("envowner", password="x")
    Membership.objects.create(tenant=tenant, user=user, role="owner")
    client = Client()
    client.force_login(user)
    link.emit("job_environment", job=job.pk, placement=placement.pk, state="preparing",
              progress="Resolved 1 package in 76ms")
    link.flush()
    drain(consumer)
    job.refresh_from_db()
    assert job.metrics["environment"] == {"state": "preparing", "progress": "Resolved 1 package in 76ms"}
    page = client.get(f"/api/jobs/{job.pk}/logs/").json()
    assert page["job"]["preparing"] == "Resolved 1 package in 76ms"
    ready = {"key": "ab" * 32, "packages": ["humanize==4.17.0"], "build_s": 0.6, "cached": False}
    link.emit("job_environment", job=job.pk, placement=placement.pk, state="ready", **ready)
    with pytest.raises(LifecycleError, match="state"):  # the worker's link refuses to send it
        link.emit("job_environment", job=job.pk, placement=placement.pk, state="sideways")
    link.flush()
    r.xadd(keys.CONTROL_STREAM, {"data": json.dumps({  # and the consumer refuses it from the stream
        "msg": "job_environment", "t": time.time(), "device": link.device, "job": job.pk, "placement": placement.pk,
        "state": "sideways"})})
    drain(consumer)
    job.refresh_from_db()
    assert job.metrics["environment"] == {"state": "ready", **ready}
    assert client.get(f"/api/jobs/{job.pk}/logs/").json()["job"]["preparing"] is None
    link.emit("job_finished", job=job.pk, placement=placement.pk, status="succeeded", reason="",
              metrics={"iterations_done": 3, "environment": {"state": "ready", **ready, "build_s": 0.0,
                                                             "cached": True}})
    link.flush()
    drain(consumer)
    assert Job.objects.get(pk=job.pk).metrics["environment"]["cached"] is True
