"""Quotas set on the tenant page go through Tenant.change: one quota_change Event with the old and new
values (the shape the API and Django admin record), none when nothing changed."""
import pytest

from zico.jobs.models import Event

pytestmark = pytest.mark.django_db


def test_a_quota_change_on_the_tenant_page_records_old_and_new_values(client_for, personas):
    old_jobs, old_budget = personas.tenant.max_running_jobs, personas.tenant.max_total_budget_bytes
    r = client_for(personas.staff).post("/tenants/acme/quotas/", {"max_running_jobs": old_jobs + 3,
                                                                  "max_total_budget_gib": "40"})
    assert r.status_code == 302
    ev = Event.objects.get(kind="quota_change", tenant=personas.tenant)
    assert ev.actor == personas.staff
    assert ev.details == {"old": {"max_running_jobs": old_jobs, "max_total_budget_bytes": old_budget},
                          "new": {"max_running_jobs": old_jobs + 3, "max_total_budget_bytes": 40 << 30}}


def test_saving_the_same_quotas_records_nothing(client_for, personas):
    personas.tenant.change(max_running_jobs=5, max_total_budget_bytes=None)
    before = Event.objects.filter(kind="quota_change").count()
    r = client_for(personas.staff).post("/tenants/acme/quotas/", {"max_running_jobs": "5",
                                                                  "max_total_budget_gib": ""})
    assert r.status_code == 302
    assert Event.objects.filter(kind="quota_change").count() == before
