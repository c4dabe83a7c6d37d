"""App config for zico.scheduling."""
from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "zico.scheduling"
    label = "scheduling"
