"""Memberships and tenant settings: role changes record events; the last owner stays; quotas validate."""
import pytest
from django.core.exceptions import ValidationError

from zico.jobs.models import Event
from zico.tenants.models import Membership, RoleError


def test_a_role_change_records_who_changed_what(personas):
    m = Membership.objects.get(tenant=personas.tenant, user=personas.teammate)
    m.set_role("admin", actor=personas.owner)
    ev = Event.objects.filter(kind="role_change", tenant=personas.tenant).first()
    assert ev.actor == personas.owner
    assert ev.details == {"user": "teammate", "old_role": "member", "new_role": "admin"}
    assert Membership.objects.get(pk=m.pk).role == "admin"


def test_the_last_owner_cannot_be_demoted_or_removed(personas):
    m = Membership.objects.get(tenant=personas.tenant, user=personas.owner)
    before = Event.objects.count()
    with pytest.raises(RoleError, match="last owner"):
        m.set_role("admin")
    with pytest.raises(RoleError, match="last owner"):
        m.remove()
    assert Membership.objects.get(pk=m.pk).role == "owner"
    assert Event.objects.count() == before


def test_an_owner_can_step_down_once_another_owner_exists(personas):
    personas.tenant.memberships.get(user=personas.admin).set_role("owner")
    personas.tenant.memberships.get(user=personas.owner).set_role("member")
    assert personas.tenant.role_of(personas.owner) == "member"


def test_adding_a_member_twice_or_with_a_bad_role_is_refused(personas):
    with pytest.raises(RoleError) as err:
        personas.tenant.add_member(personas.teammate, "member")
    assert err.value.field == "user"
    with pytest.raises(RoleError) as err:
        personas.other_tenant.add_member(personas.teammate, "superhero")
    assert err.value.field == "role"
    assert not personas.other_tenant.memberships.filter(user=personas.teammate).exists()


def test_role_ranks(personas):
    t = personas.tenant
    assert t.has_role(personas.owner, "admin") and t.has_role(personas.admin, "member")
    assert t.has_role(personas.teammate, "member") and not t.has_role(personas.teammate, "admin")
    assert t.has_role(personas.viewer, "viewer") and not t.has_role(personas.viewer, "member")
    assert not t.has_role(personas.outsider, "viewer") and t.role_of(personas.outsider) is None


def test_quota_and_setting_changes_record_separate_events(personas):
    t = personas.tenant
    changed = t.change(actor=personas.staff, max_running_jobs=2, allow_cross_tenant_colocation=True)
    assert sorted(changed) == ["allow_cross_tenant_colocation", "max_running_jobs"]
    q = Event.objects.get(kind="quota_change", tenant=t)
    assert q.details == {"old": {"max_running_jobs": 4}, "new": {"max_running_jobs": 2}}
    s = Event.objects.get(kind="tenant_change", tenant=t)
    assert s.details["new"] == {"allow_cross_tenant_colocation": True}


def test_a_negative_quota_is_refused_and_not_saved(personas):
    t = personas.tenant
    with pytest.raises(ValidationError) as err:
        t.change(max_total_budget_bytes=-1)
    assert "max_total_budget_bytes" in err.value.message_dict
    t.refresh_from_db()
    assert t.max_total_budget_bytes is None
    with pytest.raises(ValueError, match="slug"):
        t.change(slug="renamed")


def test_set_role_judges_by_the_current_role_not_a_stale_copy(personas):
    stale = Membership.objects.get(tenant=personas.tenant, user=personas.teammate)
    Membership.objects.get(pk=stale.pk).set_role("owner")
    stale.set_role("member")  # the stale copy still says member; the row says owner
    assert personas.tenant.role_of(personas.teammate) == "member"
    assert Event.objects.filter(kind="role_change", details__old_role="owner", details__new_role="member").exists()


def test_a_stale_copy_cannot_remove_the_last_owner(personas):
    personas.tenant.memberships.get(user=personas.admin).set_role("owner")
    first = Membership.objects.get(tenant=personas.tenant, user=personas.owner)
    second_stale = Membership.objects.get(tenant=personas.tenant, user=personas.admin)
    first.remove()
    with pytest.raises(RoleError, match="last owner"):
        second_stale.remove()
    assert personas.tenant.owner_count() == 1
