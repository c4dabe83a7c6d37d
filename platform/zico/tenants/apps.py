"""App config for zico.tenants."""
from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "zico.tenants"
    label = "tenants"
