"""/api/tokens/ and token authentication: the secret is shown once, tokens are private, revoked ones fail."""
import pytest
from rest_framework.test import APIClient

from zico.tenants.models import ApiToken


def bearer(raw):
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return c


@pytest.fixture
def owner_token(personas, client_for):
    r = client_for(personas.owner).post("/api/tokens/", {"name": "laptop"}, format="json")
    assert r.status_code == 201
    return r.data


def test_create_shows_the_secret_once(personas, client_for, owner_token):
    raw = owner_token["token"]
    assert raw.startswith(f"zico_{owner_token['prefix']}_")
    c = client_for(personas.owner)
    listed = c.get("/api/tokens/")
    one = c.get(f"/api/tokens/{owner_token['id']}/")
    assert listed.status_code == one.status_code == 200
    assert raw.split("_", 2)[2].encode() not in listed.content + one.content
    assert listed.data["results"][0]["active"] is True


def test_a_token_authenticates_api_calls(personas, owner_token):
    r = bearer(owner_token["token"]).get("/api/tenants/")
    assert r.status_code == 200 and [t["slug"] for t in r.data["results"]] == ["acme"]
    assert ApiToken.objects.get(pk=owner_token["id"]).last_used_at is not None


def test_a_token_submits_without_csrf(personas, owner_token):
    r = bearer(owner_token["token"]).post("/api/jobs/", {"tenant": "acme", "workload": "digits-cnn"}, format="json")
    assert r.status_code == 201


@pytest.mark.parametrize("how", ["post-revoke", "delete"])
def test_a_revoked_token_fails(personas, client_for, owner_token, how):
    c = client_for(personas.owner)
    url = f"/api/tokens/{owner_token['id']}/"
    r = c.post(url + "revoke/") if how == "post-revoke" else c.delete(url)
    assert r.status_code in (200, 204)
    assert ApiToken.objects.get(pk=owner_token["id"]).revoked_at is not None
    r = bearer(owner_token["token"]).get("/api/jobs/")
    assert r.status_code == 401 and "revoked" in r.data["detail"]


@pytest.mark.parametrize("header", ["Bearer zico_deadbeef_nope", "Bearer", "Bearer a b", "Token garbage"])
def test_bad_tokens_are_401_never_anonymous(personas, header):
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=header)
    assert c.get("/api/jobs/").status_code == 401


def test_a_token_of_an_inactive_user_fails(personas, owner_token):
    personas.owner.is_active = False
    personas.owner.save()
    assert bearer(owner_token["token"]).get("/api/jobs/").status_code == 401


@pytest.mark.parametrize("who", ["admin", "teammate", "viewer", "outsider", "staff"])
def test_others_cannot_see_or_revoke_a_users_token(personas, client_for, owner_token, who):
    c = client_for(getattr(personas, who))
    url = f"/api/tokens/{owner_token['id']}/"
    assert c.get(url).status_code == 404
    assert c.post(url + "revoke/").status_code == 404
    assert c.delete(url).status_code == 404
    assert c.get("/api/tokens/").data["count"] == 0
    assert ApiToken.objects.get(pk=owner_token["id"]).revoked_at is None


@pytest.mark.parametrize("name", ["", "   "])
def test_a_token_needs_a_name(personas, client_for, row_counts, name):
    before = row_counts()
    r = client_for(personas.owner).post("/api/tokens/", {"name": name}, format="json")
    assert r.status_code == 400 and "name" in r.data
    assert row_counts() == before


@pytest.mark.parametrize("who", ["owner", "admin", "teammate", "viewer", "outsider", "staff"])
def test_every_persona_manages_only_their_own_tokens(personas, client_for, who):
    user = getattr(personas, who)
    c = client_for(user)
    r = c.post("/api/tokens/", {"name": f"{who}-cli"}, format="json")
    assert r.status_code == 201
    assert [t["name"] for t in c.get("/api/tokens/").data["results"]] == [f"{who}-cli"]
    assert bearer(r.data["token"]).get("/api/tokens/").data["results"][0]["id"] == r.data["id"]
