"""CSRF on every form: crawl the web pages as the tenant owner and as staff (and the sign-in pages as
nobody), collect every POST form, check it carries the CSRF token, and post it without the token under
enforce_csrf_checks: 403 and nothing changed. Session-authenticated API writes need the token too; no
URL in the project is csrf_exempt except DRF's API views (which enforce it for session auth)."""
from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import urldefrag, urlsplit

import pytest
from django.apps import apps
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient
from rest_framework.views import APIView

from zico.cluster.models import Device, Node
from zico.jobs.submission import submit_job
from zico.tenants.models import ApiToken

SKIP_PREFIXES = ("/static/", "/admin/", "/api/", "/metrics", "/healthz", "/data/")


class PageParser(HTMLParser):
    """Links (a href) and forms (method, action, inputs) of one HTML page."""

    def __init__(self):
        super().__init__()
        self.links: list[str] = []
        self.forms: list[dict] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        elif tag == "form":
            self.forms.append({"method": (a.get("method") or "get").lower(), "action": a.get("action"),
                               "fields": {}})
        elif tag in ("input", "select", "textarea", "button") and self.forms and a.get("name"):
            self.forms[-1]["fields"].setdefault(a["name"], a.get("value") or "")


def crawl(client: Client, starts: list[str], limit: int = 60) -> dict[str, list[dict]]:
    """{page url: its POST forms (action resolved)} for every same-site page reachable from ``starts``."""
    seen, queue, found = set(), list(starts), {}
    while queue and len(seen) < limit:
        url = queue.pop(0)
        if url in seen:
            continue
        seen.add(url)
        r = client.get(url, follow=True)
        if r.redirect_chain:
            url = urlsplit(r.redirect_chain[-1][0]).path
        if r.status_code != 200 or "html" not in r.get("Content-Type", ""):
            continue
        p = PageParser()
        p.feed(r.content.decode())
        found[url] = [{**f, "action": f["action"] or url} for f in p.forms if f["method"] == "post"]
        for href in p.links:
            href = urldefrag(href)[0]
            parts = urlsplit(href)
            if parts.netloc or not parts.path.startswith("/") or parts.path.startswith(SKIP_PREFIXES):
                continue
            queue.append(parts.path + (f"?{parts.query}" if parts.query else ""))
    return found


def db_rows() -> dict[str, int]:
    return {m._meta.label: m.objects.count() for m in apps.get_models()
            if m._meta.app_label in ("tenants", "jobs", "cluster", "auth")}


@pytest.fixture
def site(personas):
    node = Node.objects.create(host="node-csrf")
    Device.objects.create(node=node, index=0, kind="gpu", name="T4", uuid="GPU-csrf0", total_bytes=16 << 30,
                          budget_bytes=16 << 30)
    job = submit_job(tenant=personas.tenant, owner=personas.owner, workload="digits-cnn", name="csrf-probe")
    ApiToken.issue(personas.owner, "laptop")
    return job


def test_every_post_form_carries_the_token_and_is_refused_without_it(personas, site):
    pages = {}
    for user, starts in ((personas.owner, ["/", "/tenant/", "/jobs/new/", f"/jobs/{site.pk}/", "/cluster/"]),
                         (personas.staff, ["/", "/cluster/", "/tenant/"]),
                         (None, ["/login/", "/admin/login/"])):
        c = Client()
        if user:
            c.force_login(user)
        pages[user] = crawl(c, starts)
    forms = {(user.username if user else None, f["action"]): f
             for user, found in pages.items() for fs in found.values() for f in fs}
    actions = {a for _, a in forms}
    # the crawl must have reached every kind of form the site has, or this test proves little
    for expected in ("/login/", "/admin/login/", "/logout/", "/jobs/new/", f"/jobs/{site.pk}/cancel/",
                     "/tenants/acme/members/", "/tenants/acme/quotas/", "/tenants/acme/tokens/"):
        assert expected in actions, f"crawl found no form posting to {expected}; found {sorted(actions)}"
    assert any("/revoke/" in a for a in actions) and any("/members/" in a and a.count("/") == 5 for a in actions)

    for (username, action), form in sorted(forms.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        assert "csrfmiddlewaretoken" in form["fields"], f"form posting to {action} has no CSRF token"
        strict = Client(enforce_csrf_checks=True)
        if username:
            strict.force_login(personas.owner if username == "owner" else personas.staff)
        body = {k: v for k, v in form["fields"].items() if k != "csrfmiddlewaretoken"}
        before = db_rows()
        r = strict.post(action, body)
        assert r.status_code == 403, f"{username} POST {action} without CSRF token gave {r.status_code}"
        assert db_rows() == before


def _api_writes(schema: dict) -> list[tuple[str, str]]:
    return [(method, path) for path, ops in schema["paths"].items() for method in ops
            if method in ("post", "put", "patch", "delete")]


def test_session_authenticated_api_writes_need_the_csrf_token(personas, site):
    schema = APIClient().get("/api/schema/?format=json")
    if schema.status_code != 200:  # the schema view itself may need a sign-in
        c = APIClient()
        c.force_login(personas.owner)
        schema = c.get("/api/schema/?format=json")
    writes = _api_writes(schema.json())
    assert len(writes) >= 8, writes
    token = ApiToken.objects.get(user=personas.owner)
    device = Device.objects.get()
    values = {"{id}": str(site.pk), "{slug}": "acme", "{username}": "viewer"}
    strict = APIClient(enforce_csrf_checks=True)
    strict.force_login(personas.owner)
    for method, path in writes:
        url = path
        for k, v in values.items():
            url = url.replace(k, v)
        if url.startswith("/api/tokens/"):
            url = url.replace(str(site.pk), str(token.pk))
        if url.startswith("/api/devices/"):
            url = url.replace(str(site.pk), str(device.pk))
        before = db_rows()
        r = getattr(strict, method)(url, {}, format="json")
        if url.startswith("/api/worker/"):  # a job token only (zico/api/worker.py): a session is no credential
            assert r.status_code == 401, f"{method.upper()} {url}: {r.status_code}"
        else:
            assert r.status_code == 403 and "CSRF" in r.json()["detail"], f"{method.upper()} {url}: {r.status_code}"
        assert db_rows() == before


def _patterns(resolver, prefix=""):
    for p in resolver.url_patterns:
        if isinstance(p, URLResolver):
            yield from _patterns(p, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern), p.callback


def test_only_drf_api_views_are_csrf_exempt():
    exempt = []
    for route, view in _patterns(get_resolver()):
        if getattr(view, "csrf_exempt", False):
            cls = getattr(view, "cls", None) or getattr(view, "view_class", None)
            if not (isinstance(cls, type) and issubclass(cls, APIView)):
                exempt.append(route)
    assert exempt == []
