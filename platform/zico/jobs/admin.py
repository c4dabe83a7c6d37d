"""Django admin for jobs, memory profiles and events; status changes only via the transition function."""
from django.contrib import admin, messages

from zico.admin_views import ViewOnlyAdmin

from .models import Event, Job, MemoryProfile
from .transitions import CANCELLABLE, IllegalTransition


class MemoryProfileInline(admin.TabularInline):
    model = MemoryProfile
    extra = 0
    fields = ["source", "peak_bytes", "persistent_bytes", "iteration_s", "created_at"]
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["pk", "name", "tenant", "owner", "workload", "status", "priority", "budget_bytes", "created_at"]
    list_filter = ["status", "tenant", "workload", "created_at"]
    search_fields = ["name", "workload", "owner__username", "tenant__slug"]
    readonly_fields = ["status", "created_at", "updated_at", "status_changed_at", "started_at", "finished_at",
                       "failure_reason", "waiting_reason", "waiting_kind", "waiting_since", "attempts", "lost_count",
                       "progress_iteration"]
    inlines = [MemoryProfileInline]
    actions = ["cancel_jobs"]

    def has_add_permission(self, request):
        return False  # submit through the API or web form, which validate the spec

    @admin.action(description="Cancel selected jobs")
    def cancel_jobs(self, request, queryset):
        done = 0
        for job in queryset.filter(status__in=CANCELLABLE):
            try:
                job.transition("cancelled", reason="cancelled by admin", actor=request.user)
                done += 1
            except IllegalTransition as exc:
                self.message_user(request, str(exc), messages.WARNING)
        self.message_user(request, f"cancelled {done} job(s)")


@admin.register(MemoryProfile)
class MemoryProfileAdmin(admin.ModelAdmin):
    list_display = ["pk", "job", "source", "peak_bytes", "persistent_bytes", "iteration_s", "created_at"]
    list_filter = ["source", "created_at"]
    readonly_fields = ["job", "source", "curve", "peak_bytes", "persistent_bytes", "iteration_s", "created_at"]

    def has_add_permission(self, request):
        return False


@admin.register(Event)
class EventAdmin(ViewOnlyAdmin):
    """The audit log is read-only."""

    list_display = ["time", "kind", "tenant", "device", "job", "actor"]
    list_filter = ["kind", "tenant", "time"]
    search_fields = ["job__name", "tenant__slug", "actor__username"]
    readonly_fields = ["time", "kind", "tenant", "device", "job", "actor", "details"]
    date_hierarchy = "time"
