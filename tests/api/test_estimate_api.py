"""POST /api/workloads/{key}/estimate/ with every persona: a catalog workload's CPU estimate is not tenant data, so
any user who may submit jobs asks for it (a viewer of one tenant only may not: it costs the scheduler's CPU); a
missing one is queued for the scheduler (202) and never run in the request; bad params are named. The scheduler's
side: tests/scheduling/test_scheduling_estimate_requests.py."""
import json

import pytest

from zico_contracts import keys

URL = "/api/workloads/digits-cnn/estimate/"


@pytest.fixture(autouse=True)
def rdb(estimate_redis):
    return estimate_redis


@pytest.mark.parametrize("who", ["owner", "teammate", "outsider", "staff"])
def test_users_who_submit_ask_for_an_estimate_and_it_is_queued(personas, client_for, rdb, who):
    r = client_for(getattr(personas, who)).post(URL, {"params": {"batch_size": 8}}, format="json")
    assert r.status_code == 202, r.content
    body = r.json()
    assert (body["status"], body["curve"], body["device"]) == ("pending", None, "cuda:0")
    assert body["params"]["batch_size"] == 8 and "iterations" in body["params"]  # defaults filled in
    [(key, request)] = rdb.hgetall(keys.ESTIMATE_REQUESTS).items()
    assert json.loads(request)["params"] == body["params"] and json.loads(request)["workload"] == "digits-cnn"


def test_a_viewer_only_and_an_anonymous_caller_cannot(personas, client_for, rdb):
    r = client_for(personas.viewer).post(URL, {}, format="json")
    assert r.status_code == 403 and "role member" in r.json()["detail"]
    assert client_for(None).post(URL, {}, format="json").status_code in (401, 403)
    assert not rdb.exists(keys.ESTIMATE_REQUESTS)


@pytest.mark.parametrize("url, body, status, where, message", [
    ("/api/workloads/nope/estimate/", {}, 404, "detail", "nope"),
    (URL, {"params": {"batch_size": 0}}, 400, "params", "batch_size"),
    (URL, {"params": {"colour": "red"}}, 400, "params", "colour"),
    (URL, {"params": [1]}, 400, "params", ""),
])
def test_bad_requests_are_named_and_queue_nothing(personas, client_for, rdb, url, body, status, where, message):
    r = client_for(personas.teammate).post(url, body, format="json")
    assert r.status_code == status, r.content
    assert message in json.dumps(r.json()[where])
    assert not rdb.exists(keys.ESTIMATE_REQUESTS)
