"""Django admin for tenants, memberships and API tokens (token secrets are never shown)."""
from django.contrib import admin

from zico.admin_views import ViewOnlyAdmin

from .models import QUOTA_FIELDS, SETTINGS_FIELDS, ApiToken, Membership, Tenant


class MembershipInline(admin.TabularInline):
    """Read-only: roles change on the tenant pages (web, API), which record role_change Events and
    keep the last owner (see MembershipAdmin)."""

    model = Membership
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False
    autocomplete_fields = ["user"]
    readonly_fields = ["created_at"]


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "max_running_jobs", "max_total_budget_bytes", "share_weight",
                    "max_time_limit_s", "allow_cross_tenant_colocation", "created_at"]
    list_filter = ["allow_cross_tenant_colocation", "created_at"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    readonly_fields = ["created_at"]
    inlines = [MembershipInline]

    def save_model(self, request, obj, form, change):
        # Quota and setting edits go through Tenant.change so they leave quota_change/tenant_change Events.
        audited = [f for f in form.changed_data if f in QUOTA_FIELDS + SETTINGS_FIELDS] if change else []
        changes = {f: getattr(obj, f) for f in audited}
        if audited:
            stored = Tenant.objects.get(pk=obj.pk)
            for f in audited:
                setattr(obj, f, getattr(stored, f))
        super().save_model(request, obj, form, change)
        if changes:
            obj.change(actor=request.user, **changes)


@admin.register(Membership)
class MembershipAdmin(ViewOnlyAdmin):
    """View only: add, change and remove members on the tenant pages (web /tenants/<slug>/ or the API),
    which record role_change Events and refuse to remove or demote the last owner."""

    list_display = ["user", "tenant", "role", "created_at"]
    list_filter = ["role", "tenant"]
    search_fields = ["user__username", "tenant__slug"]
    autocomplete_fields = ["user", "tenant"]
    readonly_fields = ["created_at"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are issued through the API (the secret is shown once there); admins can only revoke."""

    list_display = ["name", "user", "prefix", "created_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter), "created_at"]
    search_fields = ["name", "prefix", "user__username"]
    readonly_fields = ["user", "name", "prefix", "created_at", "last_used_at", "revoked_at"]
    exclude = ["secret_hash"]
    actions = ["revoke_tokens"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Revoke selected tokens")
    def revoke_tokens(self, request, queryset):
        for token in queryset.active():
            token.revoke()
