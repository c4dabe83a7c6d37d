"""A device declared lost is online again once its worker shows life: heartbeats resume or a new worker_up.

Real Redis and PostgreSQL; the worker side is the workers' own Link, the web side the real ControlConsumer.
"""
import time

import pytest

from workers.link import Link
from zico.cluster.models import Device, Node
from zico_contracts import keys
from zico.telemetry.consumer import ControlConsumer

pytestmark = pytest.mark.django_db(transaction=True)

DEV = "cpu.h1.0"
LOST_AFTER_S = 0.3


@pytest.fixture
def link(redis_url):
    return Link(redis_url, DEV)


def _lose(redis_url, link, dev) -> ControlConsumer:
    consumer = ControlConsumer(redis_url, name="test", block_ms=20, lost_after_s=LOST_AFTER_S)
    link.heartbeat({"pid": 1})
    consumer.tick()
    time.sleep(LOST_AFTER_S + 0.2)  # the worker stalls: no new heartbeat
    consumer.tick()
    assert Device.objects.get(pk=dev.pk).status == "offline"
    return consumer


def test_a_lost_device_whose_heartbeats_resume_is_online_again_with_its_budget_pushed(redis_url, r, link, make_device):
    dev = make_device(budget=1 << 30)
    consumer = _lose(redis_url, link, dev)
    r.delete(keys.budget_key(DEV))
    link.heartbeat({"pid": 1})  # the same worker process, back from its stall
    consumer.tick()
    assert Device.objects.get(pk=dev.pk).status == "online"
    assert Node.objects.get(pk=dev.node_id).status == "online"
    assert int(r.get(keys.budget_key(DEV))) == 1 << 30  # pushed again, as for every online device


def test_a_lost_device_stays_offline_while_its_heartbeat_stays_still(redis_url, r, link, make_device):
    dev = make_device()
    consumer = _lose(redis_url, link, dev)
    consumer.tick()
    consumer.tick()
    assert Device.objects.get(pk=dev.pk).status == "offline"


def test_a_consumer_started_after_the_loss_brings_the_device_back_when_heartbeats_change(redis_url, r, link,
                                                                                         make_device):
    dev = make_device()
    _lose(redis_url, link, dev)
    fresh = ControlConsumer(redis_url, name="test2", block_ms=20, lost_after_s=LOST_AFTER_S)
    fresh.tick()  # first read: a baseline, not yet a sign of life
    assert Device.objects.get(pk=dev.pk).status == "offline"
    link.heartbeat({"pid": 1})
    fresh.tick()
    assert Device.objects.get(pk=dev.pk).status == "online"


def test_a_lost_device_whose_worker_restarts_is_online_after_its_worker_up(redis_url, r, link, make_device):
    dev = make_device()
    consumer = _lose(redis_url, link, dev)
    link.emit("worker_up", kind="cpu", index=0, name="CPU pool", uuid="", total_bytes=4 << 30, host="h1",
              pid=2, slots=2, started_at=time.time())
    link.flush()
    for _ in range(6):
        consumer.step()
    assert Device.objects.get(pk=dev.pk).status == "online"
