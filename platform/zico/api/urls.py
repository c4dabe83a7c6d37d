"""URL map of the REST API (mounted at /api/ by zico.urls)."""
from django.urls import include, path
from rest_framework.routers import DefaultRouter

from .devices import DeviceViewSet
from .jobs import JobViewSet
from .tenants import TenantViewSet
from .tokens import TokenViewSet
from .workloads import workload_list

router = DefaultRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("devices", DeviceViewSet, basename="device")
router.register("tenants", TenantViewSet, basename="tenant")
router.register("tokens", TokenViewSet, basename="token")

urlpatterns = [
    path("workloads/", workload_list, name="workload-list"),
    path("", include(router.urls)),
]
