"""App config for zico.web."""
from django.apps import AppConfig


class WebConfig(AppConfig):
    name = "zico.web"
    label = "web"
