"""Request bodies the API must refuse cleanly: JSON nested too deep (400) and bodies over the size limit (413)."""
import json

import pytest
from django.test import override_settings

from zico.api.parsers import MAX_JSON_DEPTH


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


DEEP = 100_000  # deep enough that json.loads raises RecursionError


@pytest.mark.parametrize("depth", [DEEP, MAX_JSON_DEPTH + 1])
def test_it_refuses_a_deeply_nested_job_body_with_a_400(client_for, personas, devices, row_counts, depth):
    before = row_counts()
    body = '{"workload": "digits-cnn", "params": {"seed": ' + nested(depth) + "}}"
    r = client_for(personas.owner).post("/api/jobs/", body, content_type="application/json")
    assert r.status_code == 400, r.content[:300]
    assert r.json()["detail"].startswith("JSON parse error: nesting too deep")
    assert row_counts() == before


def test_it_accepts_nesting_up_to_the_limit(client_for, personas):
    # A body at the limit parses; the view then answers on its meaning (the workload), not the nesting.
    body = '{"workload": "no-such-workload", "params": {"x": ' + nested(MAX_JSON_DEPTH - 2) + "}}"
    r = client_for(personas.owner).post("/api/jobs/", body, content_type="application/json")
    assert r.status_code == 400
    assert "nesting" not in json.dumps(r.json())


def test_it_refuses_deep_nesting_on_tokens_and_device_budgets(client_for, personas, devices):
    body = '{"name": ' + nested(DEEP) + "}"
    r = client_for(personas.owner).post("/api/tokens/", body, content_type="application/json")
    assert r.status_code == 400 and "nesting too deep" in r.json()["detail"]
    body = '{"budget_bytes": ' + nested(DEEP) + "}"
    r = client_for(personas.staff).patch(f"/api/devices/{devices[0].pk}/", body, content_type="application/json")
    assert r.status_code == 400 and "nesting too deep" in r.json()["detail"]


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
@pytest.mark.parametrize("content_type", ["application/json", "application/x-www-form-urlencoded"])
def test_it_answers_a_json_413_naming_the_limit_for_a_body_too_large(client_for, personas, devices, row_counts,
                                                                      content_type):
    before = row_counts()
    if content_type == "application/json":
        body = json.dumps({"workload": "digits-cnn", "name": "x" * 2000})
    else:
        body = "workload=digits-cnn&name=" + "x" * 2000
    r = client_for(personas.owner).post("/api/jobs/", body, content_type=content_type)
    assert r.status_code == 413, r.content[:300]
    assert r["Content-Type"].startswith("application/json")
    assert "1000 bytes" in r.json()["detail"]
    assert row_counts() == before
