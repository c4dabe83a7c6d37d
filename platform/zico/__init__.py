"""Zico's Django project: settings, URLs, the Celery app and the web-side apps.

The Celery app (:mod:`zico.celery`) is loaded when Django sets up its apps (``zico.jobs``'
``JobsConfig.ready``), so that ``shared_task`` binds to it in every process that runs Django, and
on the first read of ``zico.celery_app``; importing this package alone does not load Celery:
``manage.py curve`` imports a module under it and runs without ``django.setup()`` or Celery
(Celery and kombu were 0.2-0.4 s of its CPU, docs/curves.md "How fast").
"""

__all__ = ["celery_app"]


def __getattr__(name: str):
    if name == "celery_app":
        from .celery import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
