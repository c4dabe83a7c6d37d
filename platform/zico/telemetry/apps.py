"""App config for zico.telemetry."""
from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "zico.telemetry"
    label = "telemetry"
