"""Access helpers shared by the API views: tenant roles, staff checks, field-named 400s.

Scoping rule: a view's queryset only ever holds the caller's tenants' objects, so another
tenant's object is a 404 (never a 403 that would confirm it exists). Within a tenant, a role
too low for the action is a 403.
"""
from __future__ import annotations

from rest_framework import exceptions, permissions

from zico.tenants.models import Tenant


def require_role(tenant: Tenant, user, at_least: str, action: str) -> None:
    """Raise 403 unless ``user`` has role ``at_least`` or higher in ``tenant``."""
    if not tenant.has_role(user, at_least):
        raise exceptions.PermissionDenied(f"{action} needs role {at_least} or higher in {tenant.slug}")


def require_manager(tenant: Tenant, user, at_least: str, action: str) -> None:
    """Like :func:`require_role`, but cluster staff (tenant-independent admins) always pass."""
    if not is_cluster_admin(user):
        require_role(tenant, user, at_least, action)


def is_cluster_admin(user) -> bool:
    """Tenant-independent administrators: Django staff or superusers."""
    return bool(getattr(user, "is_staff", False) or getattr(user, "is_superuser", False))


class IsClusterAdminOrReadOnly(permissions.BasePermission):
    message = "only cluster administrators (staff) may change this"

    def has_permission(self, request, view):
        return request.method in permissions.SAFE_METHODS or is_cluster_admin(request.user)


def refuse_other_keys(data, writable, read_only) -> None:
    """400 naming every key of a PATCH body ``data`` outside ``writable``: "read-only" for the object's other
    fields (``read_only``), "unknown field" for the rest. Every PATCH of the API refuses them the same way
    rather than ignoring them (a silently dropped ``slug`` read as applied)."""
    if not isinstance(data, dict):
        return
    others = sorted(set(data) - set(writable))
    if others:
        names = ", ".join(writable)
        raise exceptions.ValidationError({k: [f"read-only: only {names} can be changed" if k in read_only else
                                              f"unknown field: only {names} can be changed"] for k in others})


def field_error(field: str, message: str) -> exceptions.ValidationError:
    """A 400 naming ``field``; a dotted field (``params.batch_size``) becomes a nested error."""
    head, _, rest = field.partition(".")
    return exceptions.ValidationError({head: {rest: [message]}} if rest else {head: [message]})
