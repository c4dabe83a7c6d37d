"""API fuzzing from the OpenAPI schema (schemathesis, in-process through Django's WSGI app).

Every operation of /api/schema/ gets generated requests (valid and invalid bodies, queries, path values),
sent with the API token of the owner of tenant ``acme``. A second tenant is seeded with recognisable names
(the marker ``rivalsecret``) and its own jobs, tokens, members and events. Each response must not be a 5xx
and must never contain the marker. Operations with path parameters are sent twice more: aimed at acme's
real objects (no 5xx), and at the rival's (its job and token ids, its slug, its owner's name): always 4xx.
"""
import pytest
import schemathesis
from django.core import signals
from django.core.handlers.wsgi import WSGIHandler
from django.db import close_old_connections
from django.test import Client
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from zico.cluster.models import Device, Node
from zico.jobs.models import Event
from zico.jobs.submission import submit_job
from zico.tenants.models import ApiToken, Role, Tenant

MARKER = "rivalsecret"
MAX_EXAMPLES = 40  # per operation (each sent up to three times): about 1.5 minutes on 2 cores


@pytest.fixture
def world(personas):
    """acme (the personas) plus a rival tenant whose every name carries MARKER; returns the fuzzer's token."""
    from django.contrib.auth import get_user_model

    node = Node.objects.create(host="node-fuzz")
    Device.objects.create(node=node, index=0, kind="gpu", name="T4", uuid="GPU-fuzz0", total_bytes=16 << 30,
                          budget_bytes=16 << 30)
    rival = Tenant.objects.create(name=f"{MARKER} Labs", slug=MARKER)
    boss = get_user_model().objects.create_user(f"{MARKER}-owner", f"{MARKER}@example.test", "pw")
    rival.add_member(boss, Role.OWNER)
    rival.change(actor=boss, name=f"{MARKER} Labs Renamed")
    rival_job = submit_job(tenant=rival, owner=boss, workload="digits-cnn", name=f"{MARKER}-job")
    rival_token, _ = ApiToken.issue(boss, f"{MARKER}-token")
    Event.record(Event.Kind.STATUS_CHANGE, job=rival_job, actor=boss, reason=f"{MARKER} reason")
    acme_job = submit_job(tenant=personas.tenant, owner=personas.owner, workload="digits-cnn", name="acme-job")
    spare, _ = ApiToken.issue(personas.owner, "spare")  # the fuzzer may revoke this one, never its own
    _, raw = ApiToken.issue(personas.owner, "fuzzer")
    return {"token": raw,
            "own": {"id": acme_job.pk, "token_id": spare.pk, "slug": "acme", "username": "viewer"},
            "rival": {"id": rival_job.pk, "token_id": rival_token.pk, "slug": MARKER,
                                    "username": f"{MARKER}-owner"}}


@pytest.fixture
def api_schema(world):
    """The API's OpenAPI schema, bound to Django's WSGI app in-process. While it is in use the app does not
    close the database connection after each request (as django.test.Client does), so the requests run
    inside the test's transaction and see the seeded tenants."""
    c = Client()
    c.force_login(Tenant.objects.get(slug="acme").memberships.get(role=Role.OWNER).user)
    loaded = schemathesis.openapi.from_dict(c.get("/api/schema/?format=json").json())
    loaded.app = WSGIHandler()
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield loaded
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


def aimed_path(case, target) -> dict | None:
    """The case's path parameters pointed at ``target``'s objects (ids, slug, username), or None when no path
    parameter names a tenant's object (none at all, or a catalog workload's ``key``, which every tenant may use).
    Random ids rarely hit a real row; these do."""
    params = dict(case.path_parameters or {})
    path = case.operation.path
    aimed = False
    for name in params:
        if name == "id":
            params[name] = target["token_id"] if path.startswith("/api/tokens/") else target["id"]
            aimed = True
        elif name in ("slug", "username"):
            params[name] = target[name]
            aimed = True
    return params if aimed else None


def check_case(case, world) -> None:
    auth = {"Authorization": f"Bearer {world['token']}"}
    r = case.call(headers=auth)
    assert r.status_code < 500, f"{case.method} {case.formatted_path} -> {r.status_code}: {r.text[:500]}"
    assert MARKER not in r.text.lower(), f"{case.method} {case.formatted_path} leaked the rival tenant"
    if case.operation.path.startswith("/api/devices/"):
        return  # devices are shared infrastructure, not tenant objects
    own = aimed_path(case, world["own"])
    if own is not None:  # the fuzzed request at acme's real objects
        case.path_parameters = own
        r = case.call(headers=auth)
        assert r.status_code < 500, f"{case.method} {case.formatted_path} -> {r.status_code}: {r.text[:500]}"
        assert MARKER not in r.text.lower(), f"{case.method} {case.formatted_path} leaked the rival tenant"
        case.path_parameters = aimed_path(case, world["rival"])  # and at the rival's: always refused
        r = case.call(headers=auth)
        assert 400 <= r.status_code < 500, f"{case.method} {case.formatted_path} at the rival -> {r.status_code}"
        assert MARKER not in r.text.lower(), f"{case.method} {case.formatted_path} leaked the rival tenant"


def operations(api_schema):
    ops = [result.ok() for result in api_schema.get_all_operations()]
    assert len(ops) >= 20, [op.label for op in ops]  # the schema really was read
    return ops


# schemathesis' own pytest plugin (schema.parametrize) does not run under pytest 9, so each operation gets a
# plain Hypothesis test over schemathesis' strategies: valid requests and invalid ones.
@pytest.mark.slow
def test_no_5xx_and_no_cross_tenant_data(api_schema, world):
    for op in operations(api_schema):
        strategy = st.one_of(op.as_strategy(GenerationMode.POSITIVE), op.as_strategy(GenerationMode.NEGATIVE))

        @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, derandomize=True,
                  phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure reports its first example
                  suppress_health_check=list(HealthCheck))
        @given(case=strategy)
        def fuzz(case):
            check_case(case, world)

        try:
            fuzz()
        except Exception as exc:
            exc.add_note(f"operation: {op.label}")
            raise


@pytest.mark.parametrize("path", ["/api/jobs/", "/api/devices/", "/api/tenants/acme/events/", "/api/tokens/"])
def test_huge_limit_and_offset_give_an_empty_page_not_a_500(personas, path):
    """Regression: the fuzzer's first find, an OFFSET beyond PostgreSQL's bigint."""
    c = Client()
    c.force_login(personas.owner)
    r = c.get(path, {"offset": 10**20, "limit": 10**20})
    assert r.status_code == 200 and r.json()["results"] == []


@pytest.mark.parametrize("url", ["/api/jobs/?status=%00", "/api/tenants/acme/events/?kind=a%00b",
                                 "/api/tenants/acme/members/vie%00wer/", "/?x=%00"])
def test_a_nul_in_the_path_or_query_is_a_400_not_a_500(personas, url):
    """Regression: PostgreSQL refuses NUL in text; zico.input_guard answers first."""
    c = Client()
    c.force_login(personas.owner)
    r = c.get(url)
    assert r.status_code == 400 and "NUL" in r.json()["detail"]


def test_adding_a_member_without_a_role_makes_them_a_member(personas):
    """Regression: the role is optional in the schema (model default) and its absence was a 500."""
    c = Client()
    c.force_login(personas.owner)
    r = c.post("/api/tenants/acme/members/", {"username": "staff"}, content_type="application/json")
    assert r.status_code == 201 and r.json()["role"] == "member"
