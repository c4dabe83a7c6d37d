"""Tenant admin page: members and roles, quotas (staff only), API tokens shown once — by persona."""
import pytest

from zico.tenants.models import ApiToken, Role

pytestmark = pytest.mark.django_db


def test_admin_adds_a_member_and_changes_roles(client_for, personas, django_user_model):
    newcomer = django_user_model.objects.create_user("newcomer", password="x")
    c = client_for(personas.admin)
    assert c.post("/tenants/acme/members/", {"username": "newcomer", "role": "viewer"}).status_code == 302
    assert personas.tenant.role_of(newcomer) == "viewer"
    m = personas.tenant.memberships.get(user=newcomer)
    c.post(f"/tenants/acme/members/{m.pk}/", {"role": "member"})
    assert personas.tenant.role_of(newcomer) == "member"
    c.post(f"/tenants/acme/members/{m.pk}/", {"remove": "1"})
    assert personas.tenant.role_of(newcomer) is None


def test_only_owners_grant_the_owner_role(client_for, personas):
    m = personas.tenant.memberships.get(user=personas.teammate)
    assert client_for(personas.admin).post(f"/tenants/acme/members/{m.pk}/", {"role": "owner"}).status_code == 403
    assert personas.tenant.role_of(personas.teammate) == "member"
    client_for(personas.owner).post(f"/tenants/acme/members/{m.pk}/", {"role": "owner"})
    assert personas.tenant.role_of(personas.teammate) == "owner"


def test_the_last_owner_cannot_be_removed(client_for, personas):
    m = personas.tenant.memberships.get(user=personas.owner)
    r = client_for(personas.owner).post(f"/tenants/acme/members/{m.pk}/", {"remove": "1"}, follow=True)
    assert "last owner" in r.content.decode()
    assert personas.tenant.role_of(personas.owner) == Role.OWNER


def test_members_see_the_page_but_cannot_manage(client_for, personas):
    c = client_for(personas.teammate)
    html = c.get("/tenants/acme/").content.decode()
    assert "owner" in html and "teammate" in html and "Add member" not in html
    assert c.post("/tenants/acme/members/", {"username": "viewer", "role": "admin"}).status_code == 403


def test_quotas_are_set_by_staff_only(client_for, personas):
    data = {"max_running_jobs": "2", "max_total_budget_gib": "40"}
    assert client_for(personas.owner).post("/tenants/acme/quotas/", data).status_code == 403
    assert client_for(personas.staff).post("/tenants/acme/quotas/", data).status_code == 302
    personas.tenant.refresh_from_db()
    assert (personas.tenant.max_running_jobs, personas.tenant.max_total_budget_bytes) == (2, 40 << 30)


def test_a_new_token_is_shown_once_and_works_until_revoked(client_for, personas):
    c = client_for(personas.teammate)
    r = c.post("/tenants/acme/tokens/", {"name": "ci"})
    raw = r.context["new_token"]["raw"]
    assert raw.startswith("zico_") and raw in r.content.decode() and r["Cache-Control"] == "no-store"
    assert ApiToken.authenticate(raw).user == personas.teammate
    assert raw not in c.get("/tenants/acme/").content.decode()          # never shown again
    token = ApiToken.objects.get(user=personas.teammate)
    assert client_for(personas.outsider).post(f"/tenants/rival/tokens/{token.pk}/revoke/").status_code == 404
    c.post(f"/tenants/acme/tokens/{token.pk}/revoke/")
    assert ApiToken.authenticate(raw) is None
