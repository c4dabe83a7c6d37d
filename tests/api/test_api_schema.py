"""The OpenAPI schema and its docs page are served and describe every resource."""
import pytest


def test_schema_lists_every_resource(client_for):
    r = client_for(None).get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")  # public
    assert r.status_code == 200
    paths = r.json()["paths"]
    for p in ["/api/jobs/", "/api/jobs/{id}/cancel/", "/api/devices/{id}/", "/api/tenants/{slug}/members/",
              "/api/tokens/{id}/revoke/", "/api/workloads/"]:
        assert p in paths, p
    assert "apiToken" in r.json()["components"]["securitySchemes"]


def test_docs_page_is_served(client_for, personas):
    assert client_for(personas.owner).get("/api/docs/").status_code == 200


@pytest.mark.parametrize("who", ["owner", "admin", "teammate", "viewer", "outsider", "staff"])
def test_every_signed_in_persona_reads_the_workload_catalog(client_for, personas, who):
    r = client_for(getattr(personas, who)).get("/api/workloads/")
    assert r.status_code == 200 and "digits-cnn" in {w["key"] for w in r.data}
    assert "builder" not in r.data[0]  # the torch-side factory path is not published


def test_anonymous_cannot_read_the_catalog(client_for):
    assert client_for(None).get("/api/workloads/").status_code == 401


def test_docs_page_loads_swagger_ui_from_our_own_static_files_only(client_for, personas):
    import re
    from urllib.parse import urlsplit

    from django.conf import settings
    from django.contrib.staticfiles import finders

    html = client_for(personas.owner).get("/api/docs/").content.decode()
    urls = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", html)
    urls += re.findall(r"""["']([^"'\s]+\.(?:js|css|png))["']""", html)  # URLs assembled in inline script
    assert any("swagger-ui" in u for u in urls), urls
    for url in urls:
        parts = urlsplit(url)
        assert not parts.scheme and not parts.netloc, f"external URL on the docs page: {url}"
        if url.endswith((".js", ".css", ".png")):
            path = parts.path.removeprefix(settings.STATIC_URL)  # STATIC_URL is "/static/" at run time
            assert finders.find(path), f"docs page references a static file we do not have: {url}"


def test_the_job_schema_has_the_waiting_reason_read_only(client_for):
    r = client_for(None).get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    job = r.json()["components"]["schemas"]["Job"]["properties"]
    for field in ("waiting_reason", "waiting_kind", "waiting_since"):
        assert job[field].get("readOnly") is True, (field, job[field])
    assert "scheduler" in job["waiting_reason"]["description"]
