"""Django admin for jobs, memory profiles, events, code archives, output files and stored logs; status changes only
via the transition function; archives, files and logs are read-only (uploads go through the API's checks)."""
from django.contrib import admin, messages

from zico.admin_views import ViewOnlyAdmin

from . import lifecycle
from .models import CodeArchive, Event, Job, JobFile, JobLog, MemoryProfile
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
                       "progress_iteration", "code", "command", "env"]
    inlines = [MemoryProfileInline]
    actions = ["cancel_jobs"]

    def has_add_permission(self, request):
        return False  # submit through the API or web form, which validate the spec

    @admin.action(description="Cancel selected jobs")
    def cancel_jobs(self, request, queryset):
        done = 0
        for job in queryset.filter(status__in=CANCELLABLE):
            try:
                lifecycle.cancel(job, request.user, "cancelled by admin")
                done += 1
            except IllegalTransition as exc:
                self.message_user(request, str(exc), messages.WARNING)
        self.message_user(request, f"cancelled {done} job(s)")


@admin.register(MemoryProfile)
class MemoryProfileAdmin(admin.ModelAdmin):
    list_display = ["pk", "job", "tenant", "source", "peak_bytes", "persistent_bytes", "iteration_s", "uploaded_by",
                    "created_at"]
    list_filter = ["source", "created_at"]
    readonly_fields = ["job", "tenant", "identity", "uploaded_by", "source", "curve", "peak_bytes", "persistent_bytes",
                       "iteration_s", "created_at"]

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


@admin.register(CodeArchive)
class CodeArchiveAdmin(ViewOnlyAdmin):
    list_display = ["pk", "sha256", "tenant", "format", "size_bytes", "files", "uploaded_by", "created_at"]
    list_filter = ["format", "tenant", "created_at"]
    search_fields = ["sha256", "tenant__slug", "uploaded_by__username"]
    readonly_fields = ["tenant", "uploaded_by", "sha256", "format", "size_bytes", "files", "unpacked_bytes",
                       "created_at"]


@admin.register(JobFile)
class JobFileAdmin(ViewOnlyAdmin):
    list_display = ["pk", "job", "path", "size_bytes", "updated_at"]
    list_filter = ["updated_at"]
    search_fields = ["path", "job__name"]
    readonly_fields = ["job", "path", "size_bytes", "sha256", "created_at", "updated_at"]


@admin.register(JobLog)
class JobLogAdmin(ViewOnlyAdmin):
    list_display = ["pk", "job", "lines", "size_bytes", "dropped_lines", "stored_at"]
    list_filter = ["stored_at"]
    search_fields = ["job__name"]
    readonly_fields = ["job", "lines", "size_bytes", "dropped_lines", "stored_at"]
