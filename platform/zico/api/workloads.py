"""Workload catalog API: the keys, titles, defaults and param schemas a job can be submitted with, and a catalog
workload's CPU estimate (read from the estimate cache, or asked of the scheduler: zico.scheduling.estimate_requests)."""
from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.decorators import api_view
from rest_framework.response import Response

from .access import field_error, is_cluster_admin
from .jobs import ObjectJSONField


class WorkloadSerializer(serializers.Serializer):
    """One entry of the catalog (``zico_workloads.catalog.Workload.to_dict``); documents the list's shape."""

    key = serializers.CharField(help_text="catalog key; the ``workload`` of a job")
    title = serializers.CharField()
    task = serializers.CharField()
    description = serializers.CharField()
    param_schema = serializers.DictField(help_text="JSON Schema of the workload's params")
    defaults = serializers.DictField(help_text="params filled in when a job leaves them out")


@extend_schema(responses={200: WorkloadSerializer(many=True)})
@api_view(["GET"])
def workload_list(request):
    """Every workload of ``zico_workloads.catalog`` (built-ins and admin-registered plugins), as a list."""
    from zico_workloads.catalog import list_workloads

    return Response([w.to_dict() for w in list_workloads()])


class EstimateRequestSerializer(serializers.Serializer):
    """Body of POST /api/workloads/{key}/estimate/."""

    params = ObjectJSONField(required=False, default=dict, help_text="the workload's params (its JSON Schema); "
                                                                     "defaults fill in the rest")


class EstimateSerializer(serializers.Serializer):
    """An estimate of a catalog workload's memory curve: stored, waiting for the scheduler, or failed."""

    workload = serializers.CharField()
    params = serializers.DictField(help_text="the params with the workload's defaults filled in")
    device = serializers.CharField(help_text="the target the estimate is for (a CUDA device)")
    status = serializers.ChoiceField(["stored", "pending", "failed"],
                                     help_text="stored: curve given; pending: the scheduler computes it in the "
                                               "background (ask again); failed: error says why")
    requested_at = serializers.FloatField(allow_null=True, help_text="when it was asked for (unix s), while pending")
    error = serializers.CharField(allow_blank=True, help_text="why the estimate failed")
    curve = serializers.DictField(allow_null=True, help_text="the memory curve (placement.curves contract)")


@extend_schema(request=EstimateRequestSerializer,
               responses={200: EstimateSerializer,
                          202: OpenApiResponse(EstimateSerializer, description="not stored yet: asked of the "
                                               "scheduler, which computes it in the background; ask again"),
                          503: OpenApiResponse(description="too many estimates waiting, or Redis unreachable; "
                                               "Retry-After says when to ask again")})
@api_view(["POST"])
def workload_estimate(request, key: str):
    """The CPU estimate (fake tensors) of a catalog workload with ``params`` for a CUDA device, as the scheduler
    judges jobs by: 200 when stored; else 202, and the scheduler service computes it in the background (Note
    [Estimates users ask for] in zico.scheduling.estimate_requests); never run inside the request. Users who may
    submit jobs (role member or higher in a tenant) and staff. A user's own script has no estimate: it is
    profiled, or a snapshot is attached."""
    import redis

    from zico.jobs.known import ESTIMATE_DEVICE
    from zico.jobs.submission import JobSpecError, validate_spec
    from zico.scheduling import estimate_requests
    from zico.tenants.models import Role, Tenant
    from zico_workloads.catalog import UnknownWorkload, get_workload
    from zico_workloads.curves.estimate_cache import cacheable

    user = request.user
    if not is_cluster_admin(user) and not any(t.has_role(user, Role.MEMBER) for t in Tenant.objects.for_user(user)):
        raise exceptions.PermissionDenied("estimates need role member or higher in a tenant (they run on the "
                                          "scheduler's CPU)")
    try:
        get_workload(key)
    except UnknownWorkload as exc:
        raise exceptions.NotFound(str(exc)) from None
    body = EstimateRequestSerializer(data=request.data)
    body.is_valid(raise_exception=True)
    try:
        params = validate_spec(key, body.validated_data["params"])
    except JobSpecError as exc:
        raise field_error(exc.field, exc.message) from None
    if not cacheable(key, ESTIMATE_DEVICE):
        raise exceptions.ValidationError({"workload": [f"{key} is registered through an entry point: its estimate is "
                                                       "not stored by the server (its jobs are profiled)"]})
    try:
        answer = estimate_requests.ask(redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2.0,
                                                            socket_connect_timeout=2.0), key, params)
    except estimate_requests.QueueFull as exc:
        return Response({"detail": str(exc)}, status=status.HTTP_503_SERVICE_UNAVAILABLE,
                        headers={"Retry-After": "60"})
    except redis.RedisError:
        return Response({"detail": "cannot queue the estimate: Redis is unreachable; ask again later"},
                        status=status.HTTP_503_SERVICE_UNAVAILABLE, headers={"Retry-After": "30"})
    data = {"workload": key, "params": params, "device": ESTIMATE_DEVICE, "status": answer.status,
            "requested_at": answer.requested_at, "error": answer.error,
            "curve": answer.curve.to_dict() if answer.curve is not None else None}
    return Response(data, status=status.HTTP_202_ACCEPTED if answer.status == "pending" else status.HTTP_200_OK)
