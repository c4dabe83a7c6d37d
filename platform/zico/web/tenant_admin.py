"""Tenant admin page: members and roles, quotas, and the signed-in user's API tokens (a new token is shown once);
and the staff's form that creates a tenant.

Members (any role) and staff may look; admins and owners change members (only owners grant or remove the
owner role — the model refuses to remove the last owner); quotas are set by cluster staff only, and so
is creating a tenant (``manage.py tenant`` does the same from a shell).
"""
from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from zico.tenants.models import SHARE_WEIGHT_MAX, SHARE_WEIGHT_MIN, ApiToken, Role, RoleError, Tenant
from zico.tenants.services import TenantError, create_tenant

from . import access
from .forms import GIB


class AddMemberForm(forms.Form):
    username = forms.CharField(max_length=150, label="Username")
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER, label="Role")


class QuotaForm(forms.Form):
    max_running_jobs = forms.IntegerField(min_value=0, label="Running jobs at once")
    max_total_budget_gib = forms.DecimalField(min_value=0, required=False, decimal_places=3, max_digits=12,
                                              label="Total job budget (GiB)",
                                              help_text="Sum of budgets over unfinished jobs; empty = no limit.")
    share_weight = forms.FloatField(min_value=SHARE_WEIGHT_MIN, max_value=SHARE_WEIGHT_MAX, required=False,
                                    label="Fair-share weight",
                                    help_text=f"{SHARE_WEIGHT_MIN} to {SHARE_WEIGHT_MAX:g}; twice the weight, "
                                              "twice the share. Empty = unchanged.")
    max_time_limit_h = forms.DecimalField(min_value=0.001, required=False, decimal_places=3, max_digits=9,
                                          label="Job wall-clock limit (hours)",
                                          help_text="The longest one of its jobs may run; empty = no tenant limit "
                                                    "(the platform's ZICO_JOB_TIME_LIMIT_S still holds).")


class TenantCreateForm(forms.Form):
    slug = forms.SlugField(max_length=50, label="Slug", help_text="letters, digits, '-' and '_'; in URLs")
    name = forms.CharField(max_length=100, label="Name")
    owner = forms.CharField(max_length=150, required=False, label="First owner (username)",
                            help_text="optional; staff can add members afterwards")


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, label="Token name", help_text="e.g. laptop CLI, CI pipeline")


@login_required
def tenant_home(request):
    """Send the user to the admin page of their first tenant (staff without a tenant: the first tenant, or
    the new-tenant form while there is none)."""
    tenant = Tenant.objects.for_user(request.user).first() or (request.user.is_staff and Tenant.objects.first())
    if not tenant and request.user.is_staff:  # no tenant at all yet: staff get the form that creates one
        return render(request, "web/tenant_create.html", {"create_form": TenantCreateForm()})
    if not tenant:
        raise PermissionDenied("you are not a member of any tenant")
    return redirect("web-tenant", slug=tenant.slug)


@login_required
def tenant_page(request, slug: str):
    tenant = access.tenant_for(request.user, slug)
    return render(request, "web/tenant.html", _context(request, tenant))


def _context(request, tenant: Tenant, new_token: dict | None = None) -> dict:
    role = tenant.role_of(request.user)
    manage = request.user.is_staff or tenant.has_role(request.user, Role.ADMIN)
    quota = tenant.max_total_budget_bytes
    return {
        "tenant": tenant, "role": role, "manage": manage, "is_owner": tenant.has_role(request.user, Role.OWNER),
        "members": tenant.memberships.select_related("user").order_by("user__username"),
        "roles": Role.choices,
        "tenants": Tenant.objects.for_user(request.user),
        "add_form": AddMemberForm(), "token_form": TokenForm(), "create_form": TenantCreateForm(),
        "quota_form": QuotaForm(initial={"max_running_jobs": tenant.max_running_jobs,
                                         "max_total_budget_gib": None if quota is None else round(quota / GIB, 3),
                                         "share_weight": tenant.share_weight,
                                         "max_time_limit_h": None if tenant.max_time_limit_s is None
                                         else round(tenant.max_time_limit_s / 3600, 3)}),
        "tokens": ApiToken.objects.filter(user=request.user).order_by("-created_at"),
        "new_token": new_token,
    }


def _require_manager(request, tenant: Tenant, role: str = Role.ADMIN) -> None:
    if not (request.user.is_staff or tenant.has_role(request.user, role)):
        raise PermissionDenied(f"role {role} or higher needed in {tenant.slug}")


@login_required
@require_POST
def member_add(request, slug: str):
    tenant = access.tenant_for(request.user, slug)
    _require_manager(request, tenant)
    form = AddMemberForm(request.POST)
    if form.is_valid():
        role = form.cleaned_data["role"]
        if role == Role.OWNER:
            _require_manager(request, tenant, Role.OWNER)
        user = get_user_model().objects.filter(username=form.cleaned_data["username"]).first()
        if user is None:
            messages.error(request, f"No user named “{form.cleaned_data['username']}”.")
        else:
            try:
                tenant.add_member(user, role, actor=request.user)
                messages.success(request, f"{user.get_username()} added as {role}.")
            except RoleError as exc:
                messages.error(request, str(exc))
    else:
        messages.error(request, "Give a username and a role.")
    return redirect("web-tenant", slug=tenant.slug)


@login_required
@require_POST
def member_change(request, slug: str, member_id: int):
    """Change a member's role (``role`` in the POST) or remove them (``remove``)."""
    tenant = access.tenant_for(request.user, slug)
    _require_manager(request, tenant)
    m = get_object_or_404(tenant.memberships.select_related("user"), pk=member_id)
    new_role = request.POST.get("role")
    if Role.OWNER in (m.role, new_role):
        _require_manager(request, tenant, Role.OWNER)
    try:
        if "remove" in request.POST:
            m.remove(actor=request.user)
            messages.success(request, f"{m.user.get_username()} removed from {tenant.name}.")
        else:
            m.set_role(new_role or "", actor=request.user)
            messages.success(request, f"{m.user.get_username()} is now {m.role}.")
    except RoleError as exc:
        messages.error(request, str(exc))
    return redirect("web-tenant", slug=tenant.slug)


def _quota_errors(errors: dict) -> str:
    """One message line from field -> list of error texts."""
    return "Quota: " + "; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items())


@login_required
@require_POST
def quota_change(request, slug: str):
    tenant = access.tenant_for(request.user, slug)
    if not request.user.is_staff:
        raise PermissionDenied("quotas are set by cluster staff")
    form = QuotaForm(request.POST)
    if not form.is_valid():
        messages.error(request, _quota_errors(form.errors))
        return redirect("web-tenant", slug=tenant.slug)
    gib = form.cleaned_data["max_total_budget_gib"]
    changes = {"max_running_jobs": form.cleaned_data["max_running_jobs"],
               "max_total_budget_bytes": None if gib is None else int(gib * GIB)}
    hours = form.cleaned_data["max_time_limit_h"]
    changes["max_time_limit_s"] = None if hours is None else max(1, int(round(hours * 3600)))
    if form.cleaned_data["share_weight"] is not None:
        changes["share_weight"] = form.cleaned_data["share_weight"]
    try:  # Tenant.change validates and records the quota_change Event (old and new values), as the API does
        tenant.change(actor=request.user, **changes)
    except ValidationError as exc:
        messages.error(request, _quota_errors(exc.message_dict))
        return redirect("web-tenant", slug=tenant.slug)
    messages.success(request, "Quotas saved.")
    return redirect("web-tenant", slug=tenant.slug)


@login_required
@require_POST
def tenant_create(request):
    """Create a tenant (staff only), optionally with a first owner; then show its page."""
    if not request.user.is_staff:
        raise PermissionDenied("tenants are created by cluster staff")
    form = TenantCreateForm(request.POST)
    back = request.POST.get("from") or ""
    if not form.is_valid():
        messages.error(request, "New tenant: " + "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items()))
        return redirect("web-tenant", slug=back) if Tenant.objects.filter(slug=back).exists() else \
            redirect("web-tenant-home")
    owner = None
    if form.cleaned_data["owner"]:
        owner = get_user_model().objects.filter(username=form.cleaned_data["owner"], is_active=True).first()
        if owner is None:
            messages.error(request, f"New tenant: no active user “{form.cleaned_data['owner']}”.")
            return redirect("web-tenant-home")
    try:
        tenant = create_tenant(form.cleaned_data["slug"], form.cleaned_data["name"], owner=owner, actor=request.user)
    except TenantError as exc:
        messages.error(request, f"New tenant: {exc}")
        return redirect("web-tenant-home")
    messages.success(request, f"Tenant “{tenant.name}” created.")
    return redirect("web-tenant", slug=tenant.slug)


@login_required
@require_POST
def token_create(request, slug: str):
    """Issue a token for the signed-in user and show its secret in this response only (never stored)."""
    tenant = access.tenant_for(request.user, slug)
    form = TokenForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Give the token a name.")
        return redirect("web-tenant", slug=tenant.slug)
    token, raw = ApiToken.issue(request.user, form.cleaned_data["name"])
    response = render(request, "web/tenant.html", _context(request, tenant, {"name": token.name, "raw": raw}))
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def token_revoke(request, slug: str, token_id: int):
    tenant = access.tenant_for(request.user, slug)
    token = get_object_or_404(ApiToken, pk=token_id, user=request.user)
    token.revoke()
    messages.success(request, f"Token “{token.name}” revoked.")
    return redirect("web-tenant", slug=tenant.slug)
