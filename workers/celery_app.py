"""The device worker's Celery app, configured from the environment (:mod:`workers.env`), never from Django settings.

The web side has its own app (``zico.celery``) and sends the device tasks by name (:mod:`zico_contracts.tasks`) to
a device queue (:mod:`zico_contracts.queues`); the two apps share only the broker and these contracts. The
options match the web side's ``CELERY_*`` settings: JSON only, late acks, a task of a lost worker rejected (so
redelivered), one message prefetched per thread, Redis's visibility timeout ``ZICO_BROKER_VISIBILITY_TIMEOUT_S``.
"""
from __future__ import annotations

from celery import Celery

from zico_contracts.queues import CONTROL_QUEUE, TASK_ROUTES

from . import env


def make_app() -> Celery:
    """A new app for this process's environment; the tasks of :mod:`workers.tasks` bind to it once it is current.
    Raises ValueError naming a malformed variable."""
    app = Celery("zico-worker", broker=env.broker_url(), backend=env.result_backend(), fixups=[])  # no Django fixup
    app.conf.update(
        task_serializer="json", result_serializer="json", accept_content=["json"],
        task_acks_late=True, task_reject_on_worker_lost=True, worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True, result_expires=3600,
        broker_transport_options={"visibility_timeout": env.visibility_timeout_s()},
        task_routes=TASK_ROUTES, task_default_queue=CONTROL_QUEUE,
    )
    app.set_current()
    app.set_default()
    return app
