"""Estimates users ask for through the API (Note [Estimates users ask for] in zico.scheduling.estimate_requests): the
request answers 202 and queues it in Redis; the scheduler's background child (the real ``manage.py curve estimate``)
computes it beside the rounds, though no job waits for it; then the API answers the stored curve, the one the
scheduler judges jobs by. A failed estimate is answered as failed, not queued again. Real PostgreSQL and Redis."""
import sys
import time

import pytest
from rest_framework.test import APIClient

from zico.jobs import known
from zico.scheduling.estimates import BackgroundEstimates
from zico.scheduling.service import Scheduler
from tests.support.tenants import make_personas
from zico_contracts import keys

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/api/workloads/digits-cnn/estimate/"


@pytest.fixture
def rdb(estimate_redis):
    """Redis with no estimate requests or failures; the estimate cache in the test's own folder."""
    return estimate_redis


@pytest.fixture
def client(db):
    c = APIClient()
    c.force_login(make_personas().teammate)
    return c


def _rounds_until_answered(scheduler, estimates, r, deadline_s=600):
    """Rounds until no request waits in Redis, waiting on the child's exit between them (no sleeps)."""
    deadline = time.monotonic() + deadline_s
    scheduler.run_round()
    while r.hlen(keys.ESTIMATE_REQUESTS) and time.monotonic() < deadline:
        if estimates.running is not None:
            estimates.running[2].wait(timeout=deadline - time.monotonic())
        scheduler.run_round()
    assert not r.hlen(keys.ESTIMATE_REQUESTS), "the scheduler did not answer the request in time"


def test_an_estimate_asked_for_is_computed_beside_the_rounds_then_answered(client, rdb):
    body = {"params": {"batch_size": 16, "image_size": 16}}
    first = client.post(URL, body, format="json")
    assert first.status_code == 202 and first.json()["status"] == "pending"
    again = client.post(URL, body, format="json").json()
    assert again["requested_at"] == first.json()["requested_at"] and rdb.hlen(keys.ESTIMATE_REQUESTS) == 1
    estimates = BackgroundEstimates(time_limit_s=600)
    scheduler = Scheduler(estimates=estimates)
    try:
        _rounds_until_answered(scheduler, estimates, rdb)
    finally:
        estimates.close()
    r = client.post(URL, body, format="json")
    assert r.status_code == 200, r.content
    answer = r.json()
    stored = known.stored_estimate("digits-cnn", answer["params"])  # what the scheduler judges jobs by
    assert stored is not None and answer["status"] == "stored" and answer["device"] == known.ESTIMATE_DEVICE
    assert answer["curve"]["peak_bytes"] == stored.peak_bytes and answer["curve"]["source"] == "estimate"
    assert answer["params"]["batch_size"] == 16 and answer["params"]["iterations"] > 0  # defaults filled in


def _failing(workload, params_json):
    return [sys.executable, "-c", "import sys; sys.exit('CommandError: no estimate today')"]


def test_a_failed_estimate_is_answered_as_failed_and_not_queued_again(client, rdb):
    estimates = BackgroundEstimates(time_limit_s=600, argv=_failing)
    scheduler = Scheduler(estimates=estimates)
    assert client.post(URL, {}, format="json").status_code == 202
    try:
        _rounds_until_answered(scheduler, estimates, rdb)
        r = client.post(URL, {}, format="json")
        assert r.status_code == 200 and r.json()["status"] == "failed"
        assert r.json()["error"] == "the estimate failed (exit status 1): CommandError: no estimate today"
        assert not rdb.hlen(keys.ESTIMATE_REQUESTS)  # answered from the failure, not queued again
        # once the failure has expired, asking again is answered by the same scheduler without a second run
        for key in rdb.scan_iter("zico:estimate:*:failed"):
            rdb.delete(key)
        assert client.post(URL, {}, format="json").status_code == 202
        scheduler.run_round()
        assert estimates.running is None and not rdb.hlen(keys.ESTIMATE_REQUESTS)
        assert client.post(URL, {}, format="json").json()["status"] == "failed"
    finally:
        estimates.close()


def test_a_full_queue_is_a_503_with_retry_after(client, rdb):
    for size in range(1, keys.ESTIMATE_REQUESTS_MAX + 1):
        assert client.post(URL, {"params": {"batch_size": size}}, format="json").status_code == 202
    r = client.post(URL, {"params": {"batch_size": 99}}, format="json")
    assert r.status_code == 503 and r["Retry-After"] == "60" and "already waiting" in r.json()["detail"]
    assert rdb.hlen(keys.ESTIMATE_REQUESTS) == keys.ESTIMATE_REQUESTS_MAX
    assert client.post(URL, {"params": {"batch_size": 1}}, format="json").status_code == 202  # a waiting one: fine
