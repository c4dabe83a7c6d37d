"""Shared Django admin pieces: a view-only ModelAdmin for records that change only through the product's own
code paths (audit events, memberships), never by editing rows in the admin."""
from django.contrib import admin


class ViewOnlyAdmin(admin.ModelAdmin):
    """Lists and shows rows; no add, change or delete (Django grants view to staff with the view permission)."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
