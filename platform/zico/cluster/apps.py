"""App config for zico.cluster."""
from django.apps import AppConfig


class ClusterConfig(AppConfig):
    name = "zico.cluster"
    label = "cluster"
