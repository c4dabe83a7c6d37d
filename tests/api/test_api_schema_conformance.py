"""Real responses of every API endpoint validate against the OpenAPI schema the API serves.

Each request below is made by a real persona against the real views; its body is validated with jsonschema
against the response schema the served document gives for (path, method, status). The schema is made
strict first: an object schema with named properties accepts no other keys, so a field added to a response
but not to the schema fails here, as does a list documented as an object. Every documented path must be
exercised, so a new endpoint cannot slip past.
"""
import copy
import io
import re

import jsonschema
import pytest
import redis
from django.test import override_settings
from rest_framework.test import APIClient

from placement.curves import triangular_curve
from zico.cluster.models import Placement
from zico.jobs.code import issue_job_token
from tests.support.jobs import project
from zico_contracts import joblog
from zico.jobs.models import Job, MemoryProfile
from zico.tenants.models import ApiToken

from .conftest import GIB
from zico.jobs.lifecycle import transition



def _strict(node):
    """OpenAPI 3.0 -> JSON Schema: ``nullable`` becomes a null alternative; named properties are closed."""
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    node = {k: _strict(v) for k, v in node.items()}
    if node.get("type") == "object" and "properties" in node and "additionalProperties" not in node:
        node["additionalProperties"] = False
    if node.pop("nullable", False):
        return {"anyOf": [node, {"type": "null"}]}
    return node


@pytest.fixture
def schema(db):
    doc = APIClient().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    return _strict(copy.deepcopy(doc))


def _template(schema, url: str) -> str:
    path = url.split("?")[0]
    for template in schema["paths"]:
        pattern = "^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"
        if re.match(pattern, path):
            return template
    raise AssertionError(f"{path} is not in the schema")


def check(schema, response, method: str, url: str, seen: set):
    """Validate ``response`` against the schema's entry for its path, method and status."""
    template = _template(schema, url)
    op = schema["paths"][template].get(method)
    assert op is not None, f"{method.upper()} {template} is not documented"
    status = str(response.status_code)
    assert status in op["responses"], f"{method.upper()} {template} answered {status}, undocumented"
    seen.add((template, method))
    content = op["responses"][status].get("content")
    if response.status_code == 204 or content is None:
        assert not response.content, f"{method.upper()} {template} {status}: a body where none is documented"
        return
    kind = response["Content-Type"].split(";")[0]
    assert kind in content, f"{method.upper()} {template} {status}: {kind} is not documented ({sorted(content)})"
    if kind != "application/json":  # a file's bytes (format: binary)
        assert content[kind]["schema"] == {"type": "string", "format": "binary"}
        return None
    body = response.json()
    resolver_doc = {"components": schema["components"], **content["application/json"]["schema"]}
    jsonschema.validate(body, resolver_doc, cls=jsonschema.Draft7Validator)
    return body


@pytest.fixture
def call(schema):
    """call(client, method, url, data=None) -> the response, checked; ``call.seen``: (path, method) done."""
    def do(client, method, url, data=None, fmt="json"):
        response = getattr(client, method)(url, data, format=fmt) if data is not None else \
            getattr(client, method)(url)
        check(schema, response, method, url, do.seen)
        return response
    do.seen = set()
    return do


@pytest.fixture
def rates():
    """rates(api="1/d") -> a context manager setting that limit, counted under a fresh Redis key prefix."""
    import uuid

    import redis
    from django.conf import settings
    from django.test import override_settings

    prefix = f"zico-test-rl-{uuid.uuid4().hex[:12]}"
    caches = {**settings.CACHES, "ratelimit": {**settings.CACHES["ratelimit"], "KEY_PREFIX": prefix}}
    with override_settings(CACHES=caches):
        yield lambda **limits: override_settings(RATE_LIMITS={**settings.RATE_LIMITS, **limits})
    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter(f"{prefix}:*"):
        client.delete(key)


def _file(data: bytes):
    f = io.BytesIO(data)
    f.name = "upload.bin"
    return f


def _bearer(user) -> APIClient:
    _, raw = ApiToken.issue(user, "schema test")
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return c


def test_every_endpoint_answers_what_its_schema_says(personas, devices, call, schema, rates, tmp_path, settings,
                                                     torch_snapshot):
    settings.ZICO_CODE_DIR, settings.ZICO_JOB_FILES_DIR = tmp_path / "code", tmp_path / "jobfiles"
    settings.ZICO_ESTIMATE_CACHE_DIR = tmp_path / "estimates"
    rdb = redis.Redis.from_url(settings.REDIS_URL)
    for key in rdb.scan_iter("zico:estimate:*"):
        rdb.delete(key)
    small, _ = devices
    owner, teammate, outsider, staff = (_bearer(getattr(personas, p)) for p in
                                        ("owner", "teammate", "outsider", "staff"))
    anonymous = APIClient()
    # workloads, devices
    assert call(teammate, "get", "/api/workloads/").status_code == 200
    call(anonymous, "get", "/api/workloads/")
    call(teammate, "get", "/api/devices/")
    call(teammate, "get", f"/api/devices/{small.pk}/")
    call(teammate, "get", "/api/devices/999999/")
    assert call(staff, "patch", f"/api/devices/{small.pk}/", {"budget_bytes": 12 * GIB}).status_code == 200
    call(staff, "patch", f"/api/devices/{small.pk}/", {"budget_bytes": 1})
    call(teammate, "patch", f"/api/devices/{small.pk}/", {"budget_bytes": GIB})
    # jobs: submit, read, events, profile, timeline, cancel
    created = call(teammate, "post", "/api/jobs/", {"tenant": "acme", "workload": "digits-cnn",
                                                    "params": {"iterations": 5}})
    assert created.status_code == 201
    job = Job.objects.get(pk=created.json()["id"])
    assert call(teammate, "post", "/api/jobs/", {"workload": "nope"}).status_code == 400
    call(teammate, "post", "/api/jobs/", {"workload": "digits-cnn", "params": {"batch_size": "x"}})
    call(teammate, "get", "/api/jobs/")
    call(teammate, "get", f"/api/jobs/{job.pk}/")
    call(outsider, "get", f"/api/jobs/{job.pk}/")
    call(teammate, "get", f"/api/jobs/{job.pk}/events/")
    call(teammate, "get", f"/api/jobs/{job.pk}/profile/")  # 404: no profile yet
    MemoryProfile.record(job, triangular_curve(GIB, 2 * GIB))
    assert call(teammate, "get", f"/api/jobs/{job.pk}/profile/").status_code == 200
    assert call(teammate, "get", f"/api/jobs/{job.pk}/timeline/").status_code == 200
    call(teammate, "get", f"/api/jobs/{job.pk}/timeline/?window=7")
    call(outsider, "get", f"/api/jobs/{job.pk}/timeline/")
    transition(job, "ready")
    placement = Placement.objects.create(device=small, plan={})
    placement.jobs.add(job)
    transition(job, "placed", device=small)
    assert call(owner, "get", f"/api/devices/{small.pk}/timeline/").status_code == 200
    call(teammate, "get", f"/api/devices/{small.pk}/timeline/")  # 404: members do not open device timelines
    call(staff, "get", f"/api/devices/{small.pk}/timeline/?since_event=x")
    call(staff, "patch", f"/api/devices/{small.pk}/", {"budget_bytes": 128 << 20})  # 409 under the running job
    assert call(_bearer(personas.viewer), "post", f"/api/jobs/{job.pk}/cancel/").status_code == 403
    assert call(teammate, "post", f"/api/jobs/{job.pk}/cancel/").status_code == 200
    assert call(teammate, "post", f"/api/jobs/{job.pk}/cancel/").status_code == 409
    # code jobs: upload, submit, logs, files (members), code and output upload (the worker, with the job token)
    assert call(teammate, "post", "/api/code/", {"archive": _file(project()), "tenant": "acme"}, "multipart"
                ).status_code == 201
    created = call(teammate, "post", "/api/code/", {"archive": _file(project())}, "multipart")
    assert created.status_code == 200
    code_id = created.json()["id"]
    call(teammate, "post", "/api/code/", {"archive": _file(b"not an archive")}, "multipart")
    with override_settings(ZICO_CODE_MAX_BYTES=100):
        assert call(teammate, "post", "/api/code/", {"archive": _file(project())}, "multipart").status_code == 413
    call(teammate, "get", "/api/code/")
    call(teammate, "get", f"/api/code/{code_id}/")
    call(outsider, "get", f"/api/code/{code_id}/")
    code_job = call(teammate, "post", "/api/jobs/", {"code": code_id, "command": ["python", "train.py"]}).json()
    call(teammate, "post", "/api/jobs/", {"code": code_id, "command": []})
    joblog.append(redis.Redis.from_url(settings.REDIS_URL), code_job["id"], [joblog.entry("hello")])
    assert call(teammate, "get", f"/api/jobs/{code_job['id']}/logs/").json()["lines"][0]["line"] == "hello"
    call(teammate, "get", f"/api/jobs/{code_job['id']}/logs/?after=x")
    worker, auth = APIClient(), f"JobToken {issue_job_token(code_job['id'])}"
    worker.credentials(HTTP_AUTHORIZATION=auth)
    assert call(worker, "get", f"/api/worker/jobs/{code_job['id']}/code").status_code == 200
    call(worker, "get", f"/api/worker/jobs/{job.pk}/code")  # 403: another job's
    call(anonymous, "get", f"/api/worker/jobs/{code_job['id']}/code")
    upload = f"/api/worker/jobs/{code_job['id']}/files/"
    assert call(worker, "post", upload, {"path": "out.txt", "file": _file(b"42")}, "multipart").status_code == 201
    call(worker, "post", upload, {"path": "../out.txt", "file": _file(b"42")}, "multipart")
    with override_settings(ZICO_OUTPUT_MAX_FILE_BYTES=1):
        assert call(worker, "post", upload, {"path": "big.txt", "file": _file(b"42")}, "multipart").status_code == 413
    assert call(teammate, "get", f"/api/jobs/{code_job['id']}/files/").json()[0]["path"] == "out.txt"
    assert b"".join(call(teammate, "get", f"/api/jobs/{code_job['id']}/files/out.txt").streaming_content) == b"42"
    call(outsider, "get", f"/api/jobs/{code_job['id']}/files/out.txt")
    # snapshots: a job's curve, a curve for a job identity
    profile_url = f"/api/jobs/{code_job['id']}/profile/"
    assert call(teammate, "post", profile_url, {"snapshot": _file(torch_snapshot)}, "multipart").status_code == 201
    call(teammate, "post", profile_url, {"snapshot": _file(b"not a pickle")}, "multipart")
    call(_bearer(personas.viewer), "post", profile_url, {"snapshot": _file(torch_snapshot)}, "multipart")  # 403
    call(outsider, "post", profile_url, {"snapshot": _file(torch_snapshot)}, "multipart")  # 404
    with override_settings(ZICO_SNAPSHOT_MAX_BYTES=100):
        assert call(teammate, "post", profile_url, {"snapshot": _file(torch_snapshot)}, "multipart").status_code == 413
    transition(Job.objects.get(pk=code_job["id"]), "ready")
    assert call(teammate, "post", profile_url, {"snapshot": _file(torch_snapshot)}, "multipart").status_code == 409
    curve = call(teammate, "post", "/api/curves/", {"snapshot": _file(torch_snapshot), "code": code_id,
                                                    "command": '["python", "train.py"]'}, "multipart")
    assert curve.status_code == 201
    call(teammate, "post", "/api/curves/", {"snapshot": _file(torch_snapshot), "code": code_id, "command": "[]"},
         "multipart")
    with override_settings(ZICO_SNAPSHOT_MAX_BYTES=100):
        assert call(teammate, "post", "/api/curves/", {"snapshot": _file(torch_snapshot), "code": code_id,
                                                       "command": '["x"]'}, "multipart").status_code == 413
    assert call(teammate, "get", "/api/curves/").json()["results"][0]["id"] == curve.json()["id"]
    call(teammate, "get", f"/api/curves/{curve.json()['id']}/")
    call(outsider, "get", f"/api/curves/{curve.json()['id']}/")
    # estimates: asked of the scheduler (nothing stored in this test's cache), a bad param, an unknown workload
    assert call(teammate, "post", "/api/workloads/digits-cnn/estimate/", {"params": {"iterations": 5}}
                ).status_code == 202
    call(teammate, "post", "/api/workloads/digits-cnn/estimate/", {"params": {"batch_size": "x"}})
    call(teammate, "post", "/api/workloads/nope/estimate/", {})
    call(_bearer(personas.viewer), "post", "/api/workloads/digits-cnn/estimate/", {})  # 403: submits nowhere
    from zico_contracts import keys
    with override_settings(REDIS_URL="redis://127.0.0.1:1/0"):  # nothing listens there
        assert call(teammate, "post", "/api/workloads/digits-cnn/estimate/", {}).status_code == 503
    rdb.delete(keys.ESTIMATE_REQUESTS)
    # tenants, members, events
    call(owner, "get", "/api/tenants/")
    call(owner, "get", "/api/tenants/acme/")
    call(outsider, "get", "/api/tenants/acme/")
    assert call(owner, "patch", "/api/tenants/acme/", {"name": "Acme Labs"}).status_code == 200
    call(owner, "patch", "/api/tenants/acme/", {"slug": "x"})
    call(owner, "patch", "/api/tenants/acme/", {"share_weight": 2})  # 403: quotas are staff's
    call(owner, "get", "/api/tenants/acme/events/")
    assert call(owner, "get", "/api/tenants/acme/members/").status_code == 200
    assert call(owner, "post", "/api/tenants/acme/members/", {"username": "staff", "role": "viewer"}).status_code == 201
    call(owner, "post", "/api/tenants/acme/members/", {"username": "nobody", "role": "viewer"})
    assert call(owner, "patch", "/api/tenants/acme/members/staff/", {"role": "member"}).status_code == 200
    call(teammate, "patch", "/api/tenants/acme/members/staff/", {"role": "admin"})
    assert call(owner, "delete", "/api/tenants/acme/members/staff/").status_code == 204
    # tokens
    call(owner, "get", "/api/tokens/")
    new = call(owner, "post", "/api/tokens/", {"name": "ci"})
    assert new.status_code == 201
    token_id = new.json()["id"]
    call(owner, "get", f"/api/tokens/{token_id}/")
    call(owner, "post", f"/api/tokens/{token_id}/revoke/")
    assert call(owner, "delete", f"/api/tokens/{token_id}/").status_code == 204
    call(owner, "post", "/api/tokens/", {"name": " "})
    # a spent rate limit is a documented 429
    with rates(api="1/d"):
        limited = _bearer(personas.admin)
        limited.get("/api/jobs/")
        assert call(limited, "get", "/api/jobs/").status_code == 429
    # every documented operation was exercised, so a new endpoint cannot slip past
    documented = {(path, method) for path, ops in schema["paths"].items() for method in ops
                  if method in ("get", "post", "patch", "put", "delete")}
    assert not documented - call.seen, f"not exercised here: {sorted(documented - call.seen)}"


def test_the_schema_documents_lists_and_json_objects_as_they_are(schema):
    ok = schema["paths"]["/api/workloads/"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok["type"] == "array"
    job = schema["components"]["schemas"]["Job"]["properties"]
    assert job["params"]["type"] == "object" and job["metrics"]["type"] == "object"
    submit = schema["paths"]["/api/jobs/"]["post"]["responses"]
    assert {"201", "400", "401", "403", "429"} <= set(submit)
    assert "409" in schema["paths"]["/api/jobs/{id}/cancel/"]["post"]["responses"]
    assert "409" in schema["paths"]["/api/devices/{id}/"]["patch"]["responses"]
