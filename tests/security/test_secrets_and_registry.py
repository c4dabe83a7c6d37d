"""API token secrets never reach the database (every table scanned), and the workload registry is admin-only:
no route of the API, the web pages or the admin registers code; workloads come only from installed entry points."""
import pytest
from django.db import connection
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from zico_workloads.catalog import list_workloads


def rows_containing(text: str) -> dict[str, int]:
    """{table: rows whose text form contains ``text``} over every table of the public schema."""
    hits = {}
    with connection.cursor() as cur:
        cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        for (table,) in cur.fetchall():
            cur.execute(f'SELECT count(*) FROM "{table}" t WHERE strpos(t::text, %s) > 0', [text])
            n = cur.fetchone()[0]
            if n:
                hits[table] = n
    return hits


def test_no_table_holds_an_api_token_secret(personas):
    c = APIClient()
    c.force_login(personas.owner)
    made = c.post("/api/tokens/", {"name": "ci-runner"}, format="json")
    assert made.status_code == 201
    raw = made.json()["token"]
    secret = raw.split("_", 2)[2]
    # use it, so last-use bookkeeping and any request logging have had their chance to write it
    user = APIClient()
    user.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert user.get("/api/jobs/").status_code == 200
    assert rows_containing(secret) == {}
    assert rows_containing(secret[:16]) == {}  # not even a fragment
    # the scan does see the token's row: its public prefix and name are there
    assert rows_containing(made.json()["prefix"]) == {"tenants_apitoken": 1}
    assert made.json()["prefix"] in raw


def _routes(resolver=None, prefix=""):
    for p in (resolver or get_resolver()).url_patterns:
        if isinstance(p, URLResolver):
            yield from _routes(p, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern)


def test_the_workload_list_is_read_only_for_everyone_including_staff(personas):
    keys = [w.key for w in list_workloads()]
    for user in (personas.owner, personas.staff):
        c = APIClient()
        c.force_login(user)
        for method in ("post", "put", "patch", "delete"):
            body = {"key": "evil", "builder": "os:system", "title": "x", "task": "causal-lm"}
            assert getattr(c, method)("/api/workloads/", body, format="json").status_code == 405
        listed = c.get("/api/workloads/")
        assert listed.status_code == 200 and "builder" not in listed.content.decode()
    assert [w.key for w in list_workloads()] == keys


def test_no_route_registers_workloads(personas):
    c = APIClient()
    c.force_login(personas.staff)
    schema = c.get("/api/schema/?format=json").json()
    workload_ops = {(path, m) for path, ops in schema["paths"].items() if "workload" in path for m in ops}
    # the list, and asking for a catalog workload's estimate (its body holds the workload's params, nothing else)
    assert workload_ops == {("/api/workloads/", "get"), ("/api/workloads/{key}/estimate/", "post")}
    ref = schema["paths"]["/api/workloads/{key}/estimate/"]["post"]["requestBody"]["content"]["application/json"]
    body = schema["components"]["schemas"][ref["schema"]["$ref"].rsplit("/", 1)[1]]["properties"]
    assert set(body) == {"params"}, body
    assert "builder" not in str(schema)  # no request or response in the API carries code references
    routes = [r for r in _routes() if "workload" in r.lower() or "plugin" in r.lower()]
    assert routes == ["api/workloads/", "api/workloads/<str:key>/estimate/"]
    keys = [w.key for w in list_workloads()]
    asked = c.post("/api/workloads/evil/estimate/", {"builder": "os:system", "params": {}}, format="json")
    assert asked.status_code == 404 and [w.key for w in list_workloads()] == keys  # an unknown key is not made


@pytest.mark.parametrize("user", ["owner", "staff"])
def test_a_job_cannot_smuggle_a_builder_through_any_field(personas, user):
    c = APIClient()
    c.force_login(getattr(personas, user))
    r = c.post("/api/jobs/", {"tenant": "acme", "workload": "digits-cnn", "builder": "os:system",
                              "params": {"iterations": 2}}, format="json")
    if r.status_code == 201:  # unknown top-level fields are ignored by the serializer, never stored
        assert "builder" not in r.json() and "os:system" not in r.content.decode()
        assert rows_containing("os:system") == {}
    else:
        assert r.status_code in (400, 403)
