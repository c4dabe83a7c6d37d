"""The OpenAPI schema and its docs page are served and describe every resource."""


def test_schema_lists_every_resource(client_for, personas):
    r = client_for(personas.owner).get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert r.status_code == 200
    paths = r.json()["paths"]
    for p in ["/api/jobs/", "/api/jobs/{id}/cancel/", "/api/devices/{id}/", "/api/tenants/{slug}/members/",
              "/api/tokens/{id}/revoke/", "/api/workloads/"]:
        assert p in paths, p
    assert "apiToken" in r.json()["components"]["securitySchemes"]


def test_docs_page_is_served(client_for, personas):
    assert client_for(personas.owner).get("/api/docs/").status_code == 200


def test_workloads_lists_the_catalog(client_for, personas):
    r = client_for(personas.viewer).get("/api/workloads/")
    assert r.status_code == 200 and "digits-cnn" in {w["key"] for w in r.data}
