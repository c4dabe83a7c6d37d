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


# -- creating tenants, fair-share weight (staff) -------------------------------------------------
def test_staff_create_a_tenant_with_a_first_owner_from_the_team_page(client_for, personas):
    from zico.jobs.models import Event
    from zico.tenants.models import Tenant

    c = client_for(personas.staff)
    assert "Create tenant" in c.get("/tenants/acme/").content.decode()
    r = c.post("/tenant/new/", {"slug": "lab", "name": "The Lab", "owner": "teammate", "from": "acme"})
    assert r.status_code == 302 and r["Location"] == "/tenants/lab/"
    lab = Tenant.objects.get(slug="lab")
    assert lab.role_of(personas.teammate) == Role.OWNER
    assert Event.objects.get(kind="tenant_change", tenant=lab).actor == personas.staff
    # the new owner manages it from then on: adds a member with a role, changes it, removes it
    owner = client_for(personas.teammate)
    assert owner.post("/tenants/lab/members/", {"username": "viewer", "role": "admin"}).status_code == 302
    m = lab.memberships.get(user=personas.viewer)
    owner.post(f"/tenants/lab/members/{m.pk}/", {"role": "member"})
    assert lab.role_of(personas.viewer) == Role.MEMBER
    owner.post(f"/tenants/lab/members/{m.pk}/", {"remove": "1"})
    assert lab.role_of(personas.viewer) is None


@pytest.mark.parametrize("who", ["owner", "admin", "teammate", "outsider"])
def test_only_staff_create_tenants(client_for, personas, who):
    from zico.tenants.models import Tenant

    c = client_for(getattr(personas, who))
    assert "Create tenant" not in c.get("/tenants/acme/" if who != "outsider" else "/tenants/rival/").content.decode()
    assert c.post("/tenant/new/", {"slug": "lab", "name": "Lab"}).status_code == 403
    assert not Tenant.objects.filter(slug="lab").exists()


def test_a_taken_slug_is_refused_with_its_reason(client_for, personas):
    from zico.tenants.models import Tenant

    r = client_for(personas.staff).post("/tenant/new/", {"slug": "acme", "name": "Again"}, follow=True)
    assert "already exists" in r.content.decode()
    assert Tenant.objects.get(slug="acme").name == "Acme"


def test_staff_without_any_tenant_get_the_new_tenant_form(django_user_model):
    from django.test import Client

    from zico.tenants.models import Tenant

    staff = django_user_model.objects.create_user("root", password="x", is_staff=True)
    assert not Tenant.objects.exists()
    c = Client()
    c.force_login(staff)
    r = c.get("/tenant/")
    assert r.status_code == 200 and "Create tenant" in r.content.decode()


def test_staff_set_the_fair_share_weight_within_its_bounds(client_for, personas):
    c = client_for(personas.staff)
    ok = {"max_running_jobs": "4", "max_total_budget_gib": "", "share_weight": "2.5"}
    assert c.post("/tenants/acme/quotas/", ok).status_code == 302
    personas.tenant.refresh_from_db()
    assert personas.tenant.share_weight == 2.5
    r = c.post("/tenants/acme/quotas/", {**ok, "share_weight": "1e308"}, follow=True)
    assert "1000" in r.content.decode()
    personas.tenant.refresh_from_db()
    assert personas.tenant.share_weight == 2.5
