"""Event serialization and the paginated event lists behind /api/jobs/{id}/events/ and
/api/tenants/{slug}/events/ (both already scoped by their parent object's access rule)."""
from __future__ import annotations

from rest_framework import serializers

from zico.jobs.models import Event


class EventSerializer(serializers.ModelSerializer):
    tenant = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    actor = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    details = serializers.DictField(read_only=True)

    class Meta:
        model = Event
        fields = ["id", "time", "kind", "tenant", "device", "job", "actor", "details"]
        read_only_fields = fields


def paginated_events(view, request, queryset):
    """A paginated response of ``queryset`` (optionally ``?kind=``-filtered), newest first."""
    if kind := request.query_params.get("kind"):
        queryset = queryset.filter(kind=kind)
    queryset = queryset.select_related("tenant", "actor").order_by("-time", "-id")
    page = view.paginate_queryset(queryset)
    return view.get_paginated_response(EventSerializer(page, many=True).data)
