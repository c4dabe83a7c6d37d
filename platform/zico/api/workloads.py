"""Workload catalog API: the keys, titles, defaults and param schemas a job can be submitted with."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.response import Response


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
