"""Django admin for nodes, devices and placements; budgets change through Device.set_budget."""
from django import forms
from django.contrib import admin

from .models import Device, Node, Placement


class DeviceForm(forms.ModelForm):
    """A changed budget must be > 0 (Device.set_budget refuses 0; draining is the device status)."""

    def clean_budget_bytes(self):
        budget = self.cleaned_data["budget_bytes"]
        if "budget_bytes" in self.changed_data and budget is not None and budget <= 0:
            raise forms.ValidationError("must be > 0 bytes (to stop new placements, set the status to draining)")
        return budget


class DeviceInline(admin.TabularInline):
    model = Device
    form = DeviceForm
    extra = 0
    fields = ["kind", "index", "name", "uuid", "total_bytes", "budget_bytes", "status", "last_heartbeat"]
    readonly_fields = ["last_heartbeat"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["host", "status", "last_heartbeat", "created_at"]
    list_filter = ["status"]
    search_fields = ["host"]
    readonly_fields = ["last_heartbeat", "created_at"]
    inlines = [DeviceInline]

    def save_formset(self, request, form, formset, change):
        # Budget edits in the device rows go through Device.set_budget (a budget_change Event), as on the
        # device page: save the stored budget first, then set the new one.
        pending = []
        if formset.model is Device:
            for f in formset.forms:
                if f.instance.pk and "budget_bytes" in f.changed_data and f not in formset.deleted_forms:
                    pending.append((f.instance, f.instance.budget_bytes))
                    f.instance.budget_bytes = Device.objects.get(pk=f.instance.pk).budget_bytes
        super().save_formset(request, form, formset, change)
        for device, budget in pending:
            device.set_budget(budget, actor=request.user)


@admin.register(Device)
class DeviceAdmin(admin.ModelAdmin):
    form = DeviceForm
    list_display = ["__str__", "name", "kind", "total_bytes", "budget_bytes", "status", "last_heartbeat"]
    list_filter = ["kind", "status", "node"]
    search_fields = ["name", "uuid", "node__host"]
    # gate_headroom, like budget_bytes, is the row's: the worker reads both from it (its --gate-headroom only
    # seeds a new row), so the scheduler and the worker's coordinator plan with the same share
    readonly_fields = ["last_heartbeat", "created_at"]

    def save_model(self, request, obj, form, change):
        # Route budget edits through set_budget so they are validated and leave a budget_change Event.
        if change and "budget_bytes" in form.changed_data:
            new_budget = obj.budget_bytes
            obj.budget_bytes = Device.objects.get(pk=obj.pk).budget_bytes
            super().save_model(request, obj, form, change)
            obj.set_budget(new_budget, actor=request.user)
        else:
            super().save_model(request, obj, form, change)


@admin.register(Placement)
class PlacementAdmin(admin.ModelAdmin):
    """Read-only: placements are written only by the scheduler service."""

    list_display = ["pk", "device", "started_at", "ended_at", "end_reason"]
    list_filter = [("ended_at", admin.EmptyFieldListFilter), "device"]
    readonly_fields = ["device", "jobs", "plan", "started_at", "ended_at", "end_reason"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
