"""Who may see what: the tenant-scoped lookups every page and JSON endpoint of the web UI goes through.

Rules (docs/architecture.md, "Tenancy"):

* a job is visible to members (any role) of its tenant and to cluster staff (``is_staff``);
* a device timeline is visible to cluster staff, and to admins/owners of a tenant that has (or had) a job
  placed on that device — they see their own tenant's job bands only;
* a tenant's admin page is visible to its members (any role) and to staff; changes need admin or owner.

An object outside these rules is answered with 404 (not 403), so an outsider cannot even learn that it exists.
"""
from __future__ import annotations

from django.http import Http404
from django.shortcuts import get_object_or_404

from zico.cluster.models import Device
from zico.jobs.models import Job
from zico.tenants.models import Membership, Role, Tenant


def visible_jobs(user):
    """Jobs ``user`` may read: every job for staff, else the jobs of the user's tenants."""
    if not getattr(user, "is_authenticated", False):
        return Job.objects.none()
    qs = Job.objects.select_related("tenant", "owner")
    if user.is_staff:
        return qs.all()
    return qs.filter(tenant__in=Tenant.objects.for_user(user))


def job_for(user, pk: int) -> Job:
    """The job ``pk`` if ``user`` may read it. Raises Http404 otherwise (also for a missing job)."""
    return get_object_or_404(visible_jobs(user), pk=pk)


def can_cancel(user, job: Job) -> bool:
    """Staff, an admin/owner of the job's tenant, or its owner while still a member (role member or higher)."""
    if user.is_staff or job.tenant.has_role(user, Role.ADMIN):
        return True
    return job.owner_id == user.pk and job.tenant.has_role(user, Role.MEMBER)


def submit_tenants(user):
    """Tenants in which ``user`` may submit jobs (role member or higher)."""
    roles = [Role.MEMBER, Role.ADMIN, Role.OWNER]
    return Tenant.objects.filter(memberships__user=user, memberships__role__in=roles).distinct()


def admin_tenant_ids(user) -> set[int]:
    """Ids of the tenants where ``user`` is admin or owner."""
    return set(Membership.objects.filter(user=user, role__in=[Role.ADMIN, Role.OWNER])
               .values_list("tenant_id", flat=True))


def timeline_devices(user):
    """Devices whose timeline ``user`` may open: all for staff; else devices that ran a job of a tenant the
    user administers."""
    qs = Device.objects.select_related("node")
    if user.is_staff:
        return qs.all()
    tenants = admin_tenant_ids(user)
    if not tenants:
        return qs.none()
    return qs.filter(placements__jobs__tenant_id__in=tenants).distinct()


def device_for_timeline(user, pk: int) -> Device:
    """The device ``pk`` if ``user`` may open its timeline. Raises Http404 otherwise."""
    return get_object_or_404(timeline_devices(user), pk=pk)


def timeline_job_filter(user):
    """None when ``user`` sees every job's band (staff), else the set of tenant ids whose bands they see."""
    return None if user.is_staff else admin_tenant_ids(user)


def tenant_for(user, slug: str) -> Tenant:
    """The tenant ``slug`` if ``user`` is a member or staff. Raises Http404 otherwise."""
    tenant = get_object_or_404(Tenant, slug=slug)
    if not user.is_staff and tenant.role_of(user) is None:
        raise Http404("no such tenant")
    return tenant
