"""App config for zico.tenants; its ready() also registers Zico's system checks (zico/checks.py)."""
from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "zico.tenants"
    label = "tenants"

    def ready(self):
        from zico.checks import register_all

        register_all()
