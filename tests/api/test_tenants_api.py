"""/api/tenants/: scoping, settings (owners/admins), quotas (staff), members and roles — every persona."""
import pytest

from zico.jobs.models import Event
from zico.tenants.models import Membership, Tenant

GIB = 1 << 30


@pytest.mark.parametrize("who,slugs", [("owner", ["acme"]), ("admin", ["acme"]), ("teammate", ["acme"]),
                                       ("viewer", ["acme"]),
                                       ("outsider", ["rival"]), ("staff", ["acme", "rival"])])
def test_list_shows_the_callers_tenants(personas, client_for, who, slugs):
    r = client_for(getattr(personas, who)).get("/api/tenants/")
    assert r.status_code == 200
    assert [t["slug"] for t in r.data["results"]] == slugs


@pytest.mark.parametrize("who,status,role", [("owner", 200, "owner"), ("admin", 200, "admin"),
                                             ("teammate", 200, "member"), ("viewer", 200, "viewer"),
                                             ("outsider", 404, None), ("staff", 200, None)])
def test_retrieve_by_persona(personas, client_for, who, status, role):
    r = client_for(getattr(personas, who)).get("/api/tenants/acme/")
    assert r.status_code == status
    if status == 200:
        assert r.data["my_role"] == role and r.data["max_running_jobs"] == 4
    else:
        assert b"Acme" not in r.content


@pytest.mark.parametrize("who,status", [("owner", 200), ("admin", 200), ("teammate", 403), ("viewer", 403),
                                        ("outsider", 404), ("staff", 200)])
def test_settings_change_by_persona(personas, client_for, row_counts, who, status):
    before = row_counts()
    r = client_for(getattr(personas, who)).patch("/api/tenants/acme/", {"allow_cross_tenant_colocation": True},
                                                 format="json")
    assert r.status_code == status
    assert Tenant.objects.get(slug="acme").allow_cross_tenant_colocation == (status == 200)
    if status == 200:
        assert Event.objects.get(kind="tenant_change").actor == getattr(personas, who)
    else:
        assert row_counts() == before


@pytest.mark.parametrize("who,status", [("owner", 403), ("admin", 403), ("teammate", 403), ("viewer", 403),
                                        ("outsider", 404), ("staff", 200)])
def test_only_staff_set_quotas(personas, client_for, who, status):
    r = client_for(getattr(personas, who)).patch("/api/tenants/acme/",
                                                 {"max_running_jobs": 9, "max_total_budget_bytes": 40 * GIB,
                                                  "share_weight": 2.5}, format="json")
    assert r.status_code == status
    t = Tenant.objects.get(slug="acme")
    expected = (9, 40 * GIB, 2.5) if status == 200 else (4, None, 1.0)
    assert (t.max_running_jobs, t.max_total_budget_bytes, t.share_weight) == expected
    assert Event.objects.filter(kind="quota_change").count() == (status == 200)


@pytest.mark.parametrize("body,field", [({"max_total_budget_bytes": -5}, "max_total_budget_bytes"),
                                        ({"max_running_jobs": -1}, "max_running_jobs"),
                                        ({"share_weight": 0}, "share_weight"),
                                        ({"name": ""}, "name")])
def test_bad_tenant_values_are_400_and_change_nothing(personas, client_for, row_counts, body, field):
    before = row_counts()
    r = client_for(personas.staff).patch("/api/tenants/acme/", body, format="json")
    assert r.status_code == 400 and field in r.data
    assert row_counts() == before
    t = Tenant.objects.get(slug="acme")
    assert (t.name, t.max_running_jobs, t.max_total_budget_bytes) == ("Acme", 4, None)


@pytest.mark.parametrize("who,status", [("owner", 200), ("admin", 200), ("teammate", 200), ("viewer", 200),
                                        ("outsider", 404), ("staff", 200)])
def test_members_list_by_persona(personas, client_for, who, status):
    r = client_for(getattr(personas, who)).get("/api/tenants/acme/members/")
    assert r.status_code == status
    if status == 200:
        assert {m["username"]: m["role"] for m in r.data} == {
            "owner": "owner", "admin": "admin", "teammate": "member", "viewer": "viewer"}
    else:
        assert b"teammate" not in r.content


@pytest.mark.parametrize("who,status", [("owner", 201), ("admin", 201), ("teammate", 403), ("viewer", 403),
                                        ("outsider", 404), ("staff", 201)])
def test_adding_a_member_by_persona(personas, client_for, who, status):
    newcomer = type(personas.owner).objects.create_user("newcomer")
    r = client_for(getattr(personas, who)).post("/api/tenants/acme/members/",
                                                {"username": "newcomer", "role": "member"}, format="json")
    assert r.status_code == status
    assert personas.tenant.memberships.filter(user=newcomer).exists() == (status == 201)
    assert Event.objects.filter(kind="role_change", details__user="newcomer").count() == (status == 201)


def test_only_owners_grant_the_owner_role(personas, client_for):
    type(personas.owner).objects.create_user("newcomer")
    body = {"username": "newcomer", "role": "owner"}
    assert client_for(personas.admin).post("/api/tenants/acme/members/", body, format="json").status_code == 403
    assert client_for(personas.admin).patch("/api/tenants/acme/members/teammate/", {"role": "owner"},
                                            format="json").status_code == 403
    assert client_for(personas.owner).post("/api/tenants/acme/members/", body, format="json").status_code == 201


@pytest.mark.parametrize("body,field", [({"username": "ghost", "role": "member"}, "username"),
                                        ({"username": "teammate", "role": "member"}, "username"),
                                        ({"username": "outsider", "role": "emperor"}, "role")])
def test_bad_member_additions_are_400_and_store_nothing(personas, client_for, row_counts, body, field):
    before = row_counts()
    r = client_for(personas.owner).post("/api/tenants/acme/members/", body, format="json")
    assert r.status_code == 400 and field in r.data
    assert row_counts() == before


@pytest.mark.parametrize("who,status", [("owner", 200), ("admin", 200), ("teammate", 403), ("viewer", 403),
                                        ("outsider", 404), ("staff", 200)])
def test_role_change_by_persona(personas, client_for, who, status):
    r = client_for(getattr(personas, who)).patch("/api/tenants/acme/members/viewer/", {"role": "member"},
                                                 format="json")
    assert r.status_code == status
    assert personas.tenant.role_of(personas.viewer) == ("member" if status == 200 else "viewer")
    ev = Event.objects.filter(kind="role_change", details__user="viewer", details__new_role="member")
    assert ev.count() == (status == 200)


def test_the_last_owner_cannot_be_demoted_or_removed_through_the_api(personas, client_for, row_counts):
    c = client_for(personas.owner)
    before = row_counts()
    r = c.patch("/api/tenants/acme/members/owner/", {"role": "admin"}, format="json")
    assert r.status_code == 400 and "last owner" in str(r.data["role"])
    r = c.delete("/api/tenants/acme/members/owner/")
    assert r.status_code == 400 and "last owner" in str(r.data["user"])
    assert row_counts() == before


@pytest.mark.parametrize("who,status", [("owner", 204), ("admin", 204), ("teammate", 403), ("viewer", 403),
                                        ("outsider", 404), ("staff", 204)])
def test_removing_a_member_by_persona(personas, client_for, who, status):
    r = client_for(getattr(personas, who)).delete("/api/tenants/acme/members/viewer/")
    assert r.status_code == status
    assert Membership.objects.filter(tenant=personas.tenant, user=personas.viewer).exists() == (status != 204)


def test_an_admin_cannot_remove_an_owner_and_an_unknown_member_is_404(personas, client_for):
    c = client_for(personas.admin)
    assert c.delete("/api/tenants/acme/members/owner/").status_code == 403
    assert c.patch("/api/tenants/acme/members/outsider/", {"role": "member"}, format="json").status_code == 404


@pytest.mark.parametrize("who,status", [("owner", 200), ("admin", 200), ("teammate", 200), ("viewer", 200),
                                        ("outsider", 404), ("staff", 200)])
def test_tenant_events_by_persona(personas, client_for, who, status):
    personas.tenant.change(actor=personas.staff, max_running_jobs=2)
    personas.other_tenant.change(actor=personas.staff, max_running_jobs=3)
    r = client_for(getattr(personas, who)).get("/api/tenants/acme/events/?kind=quota_change")
    assert r.status_code == status
    if status == 200:
        assert [e["details"]["new"] for e in r.data["results"]] == [{"max_running_jobs": 2}]
    else:
        assert b"quota_change" not in r.content
