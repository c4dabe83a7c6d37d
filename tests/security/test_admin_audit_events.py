"""Every way a superuser can change a quota, a role or a device budget in the Django admin leaves an Event
(or the admin does not offer that change): the tenant page with its member inline, the membership page,
the node page with its device inline, the device page."""
import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from zico.cluster.models import Device, Node
from zico.jobs.models import Event
from zico.tenants.models import Membership, Role

GIB = 1 << 30


@pytest.fixture
def root(db):
    c = Client()
    c.force_login(get_user_model().objects.create_superuser("root", "root@example.test", "pw"))
    return c


@pytest.fixture
def gpu(db):
    node = Node.objects.create(host="node-audit")
    return Device.objects.create(node=node, index=0, kind="gpu", name="A100", uuid="GPU-audit0",
                                 total_bytes=40 * GIB, budget_bytes=40 * GIB)


def admin_form_data(page) -> dict:
    """The POST body the admin change page would send unchanged: main form and every inline formset."""
    forms = [page.context["adminform"].form]
    data = {}
    for inline in page.context["inline_admin_formsets"]:
        fs = inline.formset
        forms += [fs.management_form, *fs.forms]
    for form in forms:
        for bound in form:
            value = bound.value()
            if value is None or value is False:
                continue
            data[bound.html_name] = "on" if value is True else value
    return data


def inline_prefix(data: dict, field_suffix: str, value) -> str:
    """The form prefix (``memberships-2``) of the inline row whose ``field_suffix`` equals ``value``."""
    for name, v in data.items():
        if name.endswith(f"-{field_suffix}") and str(v) == str(value):
            return name[: -len(field_suffix) - 1]
    raise AssertionError(f"no inline row with {field_suffix}={value!r} in {sorted(data)}")


def test_a_quota_change_on_the_tenant_page_records_a_quota_change_event(root, personas):
    url = reverse("admin:tenants_tenant_change", args=[personas.tenant.pk])
    data = {**admin_form_data(root.get(url)), "max_running_jobs": 9}
    assert root.post(url, data).status_code == 302
    personas.tenant.refresh_from_db()
    assert personas.tenant.max_running_jobs == 9
    ev = Event.objects.get(kind="quota_change", tenant=personas.tenant)
    assert ev.actor.username == "root"
    assert ev.details["old"] == {"max_running_jobs": 4} and ev.details["new"] == {"max_running_jobs": 9}


def role_changes():
    return Event.objects.filter(kind="role_change").count()


def test_a_role_edit_in_the_tenant_member_inline_is_audited_or_not_offered(root, personas):
    url = reverse("admin:tenants_tenant_change", args=[personas.tenant.pk])
    data = admin_form_data(root.get(url))
    before = role_changes()
    member = Membership.objects.get(user=personas.viewer, tenant=personas.tenant)
    try:
        prefix = inline_prefix(data, "id", member.pk)
        data[f"{prefix}-role"] = Role.ADMIN
    except AssertionError:
        pass  # the inline offers no editable rows at all
    root.post(url, data)
    member.refresh_from_db()
    if member.role == Role.ADMIN:
        assert role_changes() == before + 1
    else:
        assert member.role == Role.VIEWER and role_changes() == before


def test_the_membership_pages_cannot_change_roles_without_an_event(root, personas):
    member = Membership.objects.get(user=personas.viewer, tenant=personas.tenant)
    before = role_changes()
    change = reverse("admin:tenants_membership_change", args=[member.pk])
    root.post(change, {"user": personas.viewer.pk, "tenant": personas.tenant.pk, "role": Role.OWNER})
    root.post(reverse("admin:tenants_membership_add"),
              {"user": personas.staff.pk, "tenant": personas.tenant.pk, "role": Role.OWNER})
    root.post(reverse("admin:tenants_membership_delete", args=[member.pk]), {"post": "yes"})
    now = {m.user.username: m.role for m in Membership.objects.filter(tenant=personas.tenant)}
    initial = {"owner": Role.OWNER, "admin": Role.ADMIN, "teammate": Role.MEMBER, "viewer": Role.VIEWER}
    differing = {u for u in now.keys() | initial.keys() if now.get(u) != initial.get(u)}
    assert role_changes() - before == len(differing)  # whatever happened is in the audit trail, one Event each


def test_a_budget_edit_in_the_node_device_inline_is_audited_or_not_offered(root, gpu):
    url = reverse("admin:cluster_node_change", args=[gpu.node.pk])
    data = admin_form_data(root.get(url))
    prefix = inline_prefix(data, "id", gpu.pk)
    data[f"{prefix}-budget_bytes"] = 8 * GIB
    root.post(url, data)
    gpu.refresh_from_db()
    events = Event.objects.filter(kind="budget_change", device=gpu)
    if gpu.budget_bytes == 8 * GIB:
        assert events.count() == 1 and events.get().details == {"old_bytes": 40 * GIB, "new_bytes": 8 * GIB}
    else:
        assert gpu.budget_bytes == 40 * GIB and not events.exists()
