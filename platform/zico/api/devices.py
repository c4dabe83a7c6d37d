"""Devices API: every signed-in user lists and reads devices; only cluster staff set budgets; a device's
memory timeline is scoped like its page (zico/api/timelines.py).

Devices are shared infrastructure, not tenant objects, so they are visible to all users; what
runs on them (jobs, placements) is shown only through the tenant-scoped jobs API.
"""
from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from zico.cluster.models import BudgetConflict, BudgetError, Device

from .access import IsClusterAdminOrReadOnly, field_error
from .fields import StrictIntegerField
from .timelines import CURSOR, DEVICE_TIMELINE, SINCE_EVENT, WINDOW, device_timeline_data


class DeviceSerializer(serializers.ModelSerializer):
    host = serializers.CharField(source="node.host", read_only=True)
    queue = serializers.CharField(read_only=True)

    class Meta:
        model = Device
        fields = ["id", "host", "index", "kind", "uuid", "name", "total_bytes", "budget_bytes", "gate_headroom",
                  "status", "last_heartbeat", "queue"]
        read_only_fields = [f for f in fields if f != "budget_bytes"]


class DeviceBudgetSerializer(serializers.Serializer):
    """Body of PATCH /api/devices/<id>/: the budget is the only writable field; any other key is refused."""

    budget_bytes = StrictIntegerField(help_text="bytes (a JSON integer); min(64 MiB, total_bytes) <= budget <= "
                                                "total_bytes; 409 when below what the device's running jobs need")

    def to_internal_value(self, data):
        if isinstance(data, dict):
            others = sorted(set(data) - set(self.fields))
            if others:
                read_only = set(DeviceSerializer.Meta.fields)
                raise serializers.ValidationError({
                    k: ["read-only: only budget_bytes can be changed" if k in read_only else
                        "unknown field: only budget_bytes can be changed"] for k in others})
        return super().to_internal_value(data)


class DeviceViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = DeviceSerializer
    permission_classes = [IsAuthenticated, IsClusterAdminOrReadOnly]
    queryset = Device.objects.select_related("node")

    @extend_schema(request=DeviceBudgetSerializer, responses={200: DeviceSerializer})
    def partial_update(self, request, pk=None):
        """Set the device's memory budget (staff only); records a budget_change Event."""
        device = self.get_object()
        body = DeviceBudgetSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            device.set_budget(body.validated_data["budget_bytes"], actor=request.user)
        except BudgetConflict as exc:  # below what the running jobs need (Note [Budget under running jobs])
            return Response({"budget_bytes": [str(exc)]}, status=status.HTTP_409_CONFLICT)
        except BudgetError as exc:
            raise field_error(exc.field, str(exc)) from exc
        return Response(DeviceSerializer(device).data)

    @extend_schema(responses={200: DEVICE_TIMELINE}, parameters=[WINDOW, CURSOR, SINCE_EVENT])
    @action(detail=True, methods=["get"])
    def timeline(self, request, pk=None):
        """Per-job bands, pool, budget and events of the device (staff; admins/owners of a tenant that ran
        a job on it, who see their own tenant's bands only; others 404)."""
        return Response(device_timeline_data(request, pk))
