"""URL map of the REST API (mounted at /api/ by zico.urls)."""
from django.urls import include, path
from rest_framework.routers import DefaultRouter

from .code import CodeArchiveViewSet
from .curves import CurveViewSet
from .devices import DeviceViewSet
from .job_outputs import JobFileDownload
from .jobs import JobViewSet
from .tenants import TenantViewSet
from .tokens import TokenViewSet
from .worker import WorkerJobCode, WorkerJobFiles
from .workloads import workload_estimate, workload_list

router = DefaultRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("code", CodeArchiveViewSet, basename="code")
router.register("curves", CurveViewSet, basename="curve")
router.register("devices", DeviceViewSet, basename="device")
router.register("tenants", TenantViewSet, basename="tenant")
router.register("tokens", TokenViewSet, basename="token")

urlpatterns = [
    path("workloads/", workload_list, name="workload-list"),
    path("workloads/<str:key>/estimate/", workload_estimate, name="workload-estimate"),
    # one output file; its path may hold slashes, so no trailing slash is added
    path("jobs/<int:pk>/files/<path:path>", JobFileDownload.as_view(), name="job-file-download"),
    # worker-facing (job token, zico/api/worker.py)
    path("worker/jobs/<int:pk>/code", WorkerJobCode.as_view(), name="worker-job-code"),
    path("worker/jobs/<int:pk>/files/", WorkerJobFiles.as_view(), name="worker-job-files"),
    path("", include(router.urls)),
]
