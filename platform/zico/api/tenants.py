"""Tenants API: your tenants, their settings and quotas, and their members' roles.

Who may change what:
* name, allow_cross_tenant_colocation — the tenant's owners and admins;
* max_running_jobs, max_total_budget_bytes, share_weight, max_time_limit_s (quotas; the last in seconds, the
  longest one of its jobs may run, null: no tenant limit) — cluster staff only: a quota limits a
  tenant's share of the cluster, so the tenant cannot raise its own;
* members — admins add/remove members, admins and viewers; only owners grant, change or remove
  the owner role; the last owner cannot be demoted or removed.
Cluster staff are tenant-independent admins: they see every tenant and may do all of the above
(as the web pages allow); everyone else sees only tenants they belong to.
"""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import models
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from zico.jobs.models import on_device_q
from zico.tenants.models import QUOTA_FIELDS, SETTINGS_FIELDS, Membership, Role, RoleError, Tenant

from .access import field_error, is_cluster_admin, refuse_other_keys, require_manager
from .events import EventSerializer, paginated_events


class TenantSerializer(serializers.ModelSerializer):
    my_role = serializers.SerializerMethodField()
    running_jobs = serializers.SerializerMethodField()
    budgeted_bytes = serializers.SerializerMethodField(help_text="sum of budgets of unfinished jobs, bytes")

    class Meta:
        model = Tenant
        fields = ["slug", "name", "max_running_jobs", "max_total_budget_bytes", "share_weight", "max_time_limit_s",
                  "allow_cross_tenant_colocation", "created_at", "my_role", "running_jobs", "budgeted_bytes"]
        read_only_fields = ["slug", "created_at"]

    def get_my_role(self, tenant) -> str | None:
        return tenant.role_of(self.context["request"].user)

    def get_running_jobs(self, tenant) -> int:
        return tenant.jobs.filter(on_device_q()).count()  # the quota's count (lifecycle.place_many)

    def get_budgeted_bytes(self, tenant) -> int:
        return tenant.jobs.unfinished().aggregate(s=models.Sum("budget_bytes"))["s"] or 0


class MemberSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username")

    class Meta:
        model = Membership
        fields = ["username", "role", "created_at"]
        read_only_fields = ["created_at"]


class RoleSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=Role.choices)


class TenantViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = TenantSerializer
    lookup_field = "slug"

    def get_queryset(self):
        user = self.request.user
        return Tenant.objects.all() if is_cluster_admin(user) else Tenant.objects.for_user(user)

    @extend_schema(request=TenantSerializer, responses={200: TenantSerializer})
    def partial_update(self, request, slug=None):
        """Change settings (owners/admins) or quotas (staff); records tenant_change / quota_change Events."""
        tenant = self.get_object()
        refuse_other_keys(request.data, (*SETTINGS_FIELDS, *QUOTA_FIELDS), TenantSerializer.Meta.fields)
        body = TenantSerializer(tenant, data=request.data, partial=True, context={"request": request})
        body.is_valid(raise_exception=True)
        changes = {k: v for k, v in body.validated_data.items() if k in QUOTA_FIELDS + SETTINGS_FIELDS}
        if any(k in QUOTA_FIELDS for k in changes) and not is_cluster_admin(request.user):
            raise exceptions.PermissionDenied("quotas are set by cluster administrators (staff)")
        if any(k in SETTINGS_FIELDS for k in changes):
            require_manager(tenant, request.user, Role.ADMIN, "changing tenant settings")
        try:
            tenant.change(actor=request.user, **changes)
        except DjangoValidationError as exc:
            raise exceptions.ValidationError(exc.message_dict) from exc
        return Response(TenantSerializer(tenant, context={"request": request}).data)

    @extend_schema(methods=["GET"], responses={200: MemberSerializer(many=True)})
    @extend_schema(methods=["POST"], request=MemberSerializer, responses={201: MemberSerializer})
    @action(detail=True, methods=["get", "post"], pagination_class=None)  # the whole list (no pages)
    def members(self, request, slug=None):
        """GET: the members (any member). POST {username, role}: add one (admins; owner role: owners)."""
        tenant = self.get_object()
        if request.method == "GET":
            qs = tenant.memberships.select_related("user").order_by("user__username")
            return Response(MemberSerializer(qs, many=True).data)
        require_manager(tenant, request.user, Role.ADMIN, "adding members")
        body = MemberSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        role = body.validated_data.get("role", Role.MEMBER)  # optional: the model's default (was a 500, tests/fuzz)
        if role == Role.OWNER:
            require_manager(tenant, request.user, Role.OWNER, "granting the owner role")
        username = body.validated_data["user"]["username"]
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise field_error("username", f"no active user {username!r}")
        try:
            m = tenant.add_member(user, role, actor=request.user)
        except RoleError as exc:
            raise field_error("username" if exc.field == "user" else exc.field, str(exc)) from exc
        return Response(MemberSerializer(m).data, status=status.HTTP_201_CREATED)

    @extend_schema(methods=["PATCH"], request=RoleSerializer, responses={200: MemberSerializer})
    @extend_schema(methods=["DELETE"], request=None, responses={204: None})
    @action(detail=True, methods=["patch", "delete"], url_path=r"members/(?P<username>[^/]+)")
    def member(self, request, slug=None, username=None):
        """PATCH {role}: change a role. DELETE: remove the member. Admins; anything touching owners: owners."""
        tenant = self.get_object()
        require_manager(tenant, request.user, Role.ADMIN, "managing members")
        m = tenant.memberships.select_related("user").filter(user__username=username).first()
        if m is None:
            raise exceptions.NotFound(f"{username!r} is not a member of {tenant.slug}")
        try:
            if request.method == "DELETE":
                if m.role == Role.OWNER:
                    require_manager(tenant, request.user, Role.OWNER, "removing an owner")
                m.remove(actor=request.user)
                return Response(status=status.HTTP_204_NO_CONTENT)
            refuse_other_keys(request.data, ("role",), MemberSerializer.Meta.fields)
            body = RoleSerializer(data=request.data)
            body.is_valid(raise_exception=True)
            new = body.validated_data["role"]
            if Role.OWNER in (m.role, new):
                require_manager(tenant, request.user, Role.OWNER, "granting or changing the owner role")
            m.set_role(new, actor=request.user)
        except RoleError as exc:
            raise field_error(exc.field, str(exc)) from exc
        return Response(MemberSerializer(m).data)

    @extend_schema(responses={200: EventSerializer(many=True)},
                   parameters=[OpenApiParameter("kind", str, description="only events of this kind")])
    @action(detail=True, methods=["get"])
    def events(self, request, slug=None):
        """The tenant's audit trail (any member, or staff): its jobs' events, role, quota and setting changes."""
        return paginated_events(self, request, self.get_object().events.all())
