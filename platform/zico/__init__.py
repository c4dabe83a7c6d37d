"""Zico's Django project: settings, URLs, the Celery app and the web-side apps.

Importing this package loads the Celery app so that ``shared_task`` binds to it.
"""
from .celery import app as celery_app

__all__ = ["celery_app"]
