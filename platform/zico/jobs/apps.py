"""App config for zico.jobs."""
from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "zico.jobs"
    label = "jobs"
