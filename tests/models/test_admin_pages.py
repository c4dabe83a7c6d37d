"""The Django admin serves every Zico model's list (with its filters) and change pages to a superuser,
and refuses edits that must go through the model's own functions (events, placements, job status)."""
import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from placement.curves import triangular_curve
from zico.cluster.models import Device, Placement
from zico.jobs.models import CodeArchive, Event, Job, JobFile, JobLog, MemoryProfile
from zico.tenants.models import ApiToken
from zico.jobs.lifecycle import transition

ZICO_APPS = ("tenants", "cluster", "jobs")


@pytest.fixture
def admin_client(personas, gpu):
    job = Job.objects.create(tenant=personas.tenant, owner=personas.owner, workload="digits-cnn")
    MemoryProfile.record(job, triangular_curve(1e6, 4e6))
    Placement.objects.create(device=gpu).jobs.add(job)
    ApiToken.issue(personas.owner, "laptop")
    transition(job, "cancelled", reason="test")
    archive = CodeArchive.objects.create(tenant=personas.tenant, sha256="a" * 64, format="tar.gz", size_bytes=10,
                                         files=1, unpacked_bytes=5)
    code_job = Job.objects.create(tenant=personas.tenant, owner=personas.owner, code=archive, command=["true"])
    JobFile.objects.create(job=code_job, path="out.txt", size_bytes=1, sha256="b" * 64)
    JobLog.objects.create(job=code_job, lines=0, size_bytes=0)
    root = get_user_model().objects.create_superuser("root", "root@example.test", "pw")
    c = Client()
    c.force_login(root)
    return c


def zico_models():
    return [m for m in admin.site._registry if m._meta.app_label in ZICO_APPS]


def test_every_zico_model_is_registered():
    names = {m.__name__ for m in zico_models()}
    assert names == {"Tenant", "Membership", "ApiToken", "Node", "Device", "Placement", "Job", "MemoryProfile",
                     "Event", "CodeArchive", "JobFile", "JobLog"}


@pytest.mark.parametrize("model", zico_models(), ids=lambda m: m.__name__)
def test_list_with_filters_search_and_change_pages_render(admin_client, model):
    opts = model._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    assert admin_client.get(url).status_code == 200
    assert admin_client.get(url, {"q": "a"}).status_code == 200
    obj = model.objects.first()
    change = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
    assert admin_client.get(change).status_code == 200


def test_events_are_read_only_in_the_admin(admin_client):
    ev = Event.objects.first()
    url = reverse("admin:jobs_event_delete", args=[ev.pk])
    assert admin_client.post(url, {"post": "yes"}).status_code == 403
    assert Event.objects.filter(pk=ev.pk).exists()


def test_the_token_secret_hash_is_not_shown(admin_client):
    token = ApiToken.objects.first()
    page = admin_client.get(reverse("admin:tenants_apitoken_change", args=[token.pk])).content.decode()
    assert token.secret_hash not in page


def test_a_budget_edit_in_the_admin_records_an_event(admin_client, gpu):
    url = reverse("admin:cluster_device_change", args=[gpu.pk])
    data = {"node": gpu.node_id, "index": 0, "kind": "gpu", "uuid": gpu.uuid, "name": gpu.name,
            "total_bytes": gpu.total_bytes, "budget_bytes": 4 << 30, "gate_headroom": gpu.gate_headroom,
            "status": "online"}
    r = admin_client.post(url, data)
    assert r.status_code == 302, r.content[:2000]
    assert Device.objects.get(pk=gpu.pk).budget_bytes == 4 << 30
    assert Event.objects.filter(kind="budget_change", device=gpu).count() == 1
    # the gate headroom is the row's too (its worker only seeds it): staff set it here, and a bad one is refused
    assert admin_client.post(url, {**data, "gate_headroom": 0.2}).status_code == 302
    assert Device.objects.get(pk=gpu.pk).gate_headroom == 0.2
    assert admin_client.post(url, {**data, "gate_headroom": 1.5}).status_code == 200  # the form again, with the error
    assert Device.objects.get(pk=gpu.pk).gate_headroom == 0.2
