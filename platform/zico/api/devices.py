"""Devices API: every signed-in user lists and reads devices; only cluster staff set budgets and drain devices; a
device's memory timeline is scoped like its page (zico/api/timelines.py).

Devices are shared infrastructure, not tenant objects, so they are visible to all users; what
runs on them (jobs, placements) is shown only through the tenant-scoped jobs API.
"""
from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response

from django.db import transaction

from zico.cluster.models import BudgetConflict, BudgetError, Device, DeviceStatusConflict

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
        read_only_fields = [f for f in fields if f not in ("budget_bytes", "status")]


class DevicePatchSerializer(serializers.Serializer):
    """Body of PATCH /api/devices/<id>/: the budget and the status (online or draining) are the writable fields,
    at least one of them; any other key is refused."""

    budget_bytes = StrictIntegerField(required=False, help_text=(
        "bytes (a JSON integer); min(64 MiB, total_bytes) <= budget <= total_bytes; 409 when below what the "
        "device's running jobs need"))
    status = serializers.ChoiceField(choices=[s.value for s in Device.SETTABLE_STATUSES], required=False, help_text=(
        "draining: the device runs its jobs and takes no new placements; online: it takes them again (409 "
        "while the device is offline: that status follows its worker)"))

    def to_internal_value(self, data):
        if isinstance(data, dict):
            others = sorted(set(data) - set(self.fields))
            if others:
                read_only = set(DeviceSerializer.Meta.fields)
                raise serializers.ValidationError({
                    k: ["read-only: only budget_bytes and status can be changed" if k in read_only else
                        "unknown field: only budget_bytes and status can be changed"] for k in others})
            if not data:
                raise serializers.ValidationError({"budget_bytes": ["give budget_bytes, status or both"]})
        return super().to_internal_value(data)


class DeviceViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = DeviceSerializer
    permission_classes = [IsAuthenticated, IsClusterAdminOrReadOnly]
    queryset = Device.objects.select_related("node")

    @extend_schema(request=DevicePatchSerializer, responses={200: DeviceSerializer})
    def partial_update(self, request, pk=None):
        """Set the device's memory budget and/or its status, draining or online (staff only); records a
        budget_change and a device_status Event. Both or neither: a refused budget leaves the status as it was."""
        device = self.get_object()
        body = DevicePatchSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        wanted = body.validated_data
        try:
            with transaction.atomic():  # the status first, so that "drain and lower" is one request
                if "status" in wanted:
                    device.set_status(wanted["status"], actor=request.user)
                if "budget_bytes" in wanted:
                    device.set_budget(wanted["budget_bytes"], actor=request.user)
        except (BudgetConflict, DeviceStatusConflict) as exc:  # the device's state refuses it
            device.refresh_from_db()
            return Response({exc.field: [str(exc)]}, status=status.HTTP_409_CONFLICT)
        except BudgetError as exc:
            raise field_error(exc.field, str(exc)) from exc
        return Response(DeviceSerializer(device).data)

    @extend_schema(responses={200: DEVICE_TIMELINE}, parameters=[WINDOW, CURSOR, SINCE_EVENT])
    @action(detail=True, methods=["get"])
    def timeline(self, request, pk=None):
        """Per-job bands, pool, budget and events of the device (staff; admins/owners of a tenant that ran
        a job on it, who see their own tenant's bands only; others 404)."""
        return Response(device_timeline_data(request, pk))
