"""The one Celery app, configured from Django settings (``CELERY_`` namespace).

Queues and routes are declared in :mod:`zico_contracts.queues`. Start a control worker with
``celery -A zico worker -Q control``; GPU/CPU device workers are started by
``workers`` (see README).
"""
import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "zico.settings")

app = Celery("zico")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

from zico_contracts.queues import CONTROL_QUEUE, TASK_ROUTES  # noqa: E402

app.conf.task_routes = TASK_ROUTES
app.conf.task_default_queue = CONTROL_QUEUE
app.conf.imports = ("zico.health",)
