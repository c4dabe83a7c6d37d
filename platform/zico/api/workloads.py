"""Workload catalog API: the keys, titles, defaults and param schemas a job can be submitted with."""
from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.response import Response


@extend_schema(responses={200: OpenApiTypes.OBJECT})
@api_view(["GET"])
def workload_list(request):
    """Every workload of ``workers.workloads.catalog`` (built-ins and admin-registered plugins)."""
    from workers.workloads.catalog import list_workloads

    return Response([w.to_dict() for w in list_workloads()])
