"""URL map of the server-rendered pages and the JSON endpoints they poll.

Route names start with ``web-`` (``login``/``logout`` keep the names settings.LOGIN_URL uses), so they
cannot collide with the REST API's router names such as ``job-detail``.
"""
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import path
from django.views.generic.base import RedirectView

from . import code_jobs, data, devices, jobs, tenant_admin

def favicon(request):
    """Redirect to the static icon, resolved per request: the manifest storage knows its hashed name only
    after collectstatic, so resolving it when the URLs load breaks ``manage.py check --deploy`` without it."""
    return RedirectView.as_view(url=static("zico/favicon.svg"), permanent=True)(request)


urlpatterns = [
    # browsers ask for /favicon.ico whenever a page's <link rel="icon"> has not loaded yet
    path("favicon.ico", favicon),
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", jobs.job_list, name="web-jobs"),
    path("jobs/new/", jobs.job_submit, name="web-job-submit"),
    path("jobs/new/code/", code_jobs.job_submit_code, name="web-job-submit-code"),
    path("jobs/<int:pk>/", jobs.job_detail, name="web-job-detail"),
    path("jobs/<int:pk>/cancel/", jobs.job_cancel, name="web-job-cancel"),
    path("cluster/", devices.cluster, name="web-cluster"),
    path("devices/<int:pk>/", devices.device_timeline, name="web-device-timeline"),
    path("tenant/", tenant_admin.tenant_home, name="web-tenant-home"),
    path("tenant/new/", tenant_admin.tenant_create, name="web-tenant-create"),
    path("tenants/<slug:slug>/", tenant_admin.tenant_page, name="web-tenant"),
    path("tenants/<slug:slug>/members/", tenant_admin.member_add, name="web-member-add"),
    path("tenants/<slug:slug>/members/<int:member_id>/", tenant_admin.member_change, name="web-member-change"),
    path("tenants/<slug:slug>/quotas/", tenant_admin.quota_change, name="web-quota-change"),
    path("tenants/<slug:slug>/tokens/", tenant_admin.token_create, name="web-token-create"),
    path("tenants/<slug:slug>/tokens/<int:token_id>/revoke/", tenant_admin.token_revoke, name="web-token-revoke"),
    # JSON polled by the pages
    path("data/jobs/status.json", data.jobs_status, name="web-data-jobs-status"),
    path("data/jobs/<int:pk>/panels.json", jobs.job_panels_data, name="web-data-job-panels"),
    path("data/jobs/<int:pk>/memory.json", data.job_memory_data, name="web-data-job-memory"),
    path("data/jobs/<int:pk>/metrics.json", data.job_metrics_data, name="web-data-job-metrics"),
    path("data/devices/<int:pk>/timeline.json", data.device_timeline_data, name="web-data-device-timeline"),
]
