"""App config for zico.jobs: loads the project's Celery app; after `migrate`, the built-in LM corpus is written
under ZICO_DATA_DIR."""
import logging

from django.apps import AppConfig
from django.db.models.signals import post_migrate

log = logging.getLogger(__name__)


def ensure_builtin_data(sender, **kwargs) -> None:
    """Write the built-in text corpus (zico_workloads.corpus) under the data directory if it is missing.

    The LM workloads' default ``corpus`` parameter names it, and submissions are validated against the data
    directory, so a fresh deployment must have it before the first LM job is submitted. Idempotent and atomic;
    an unwritable data directory is only logged (system check zico.W001 reports it too).
    """
    from django.conf import settings

    from zico_workloads.corpus import ensure_corpus

    try:
        ensure_corpus(settings.ZICO_DATA_DIR)
    except OSError as exc:
        log.warning("could not write the built-in corpus under %s: %s", settings.ZICO_DATA_DIR, exc)


class JobsConfig(AppConfig):
    name = "zico.jobs"
    label = "jobs"

    def ready(self) -> None:
        # The project's Celery app, so that shared_task binds to it wherever Django runs (zico/__init__.py).
        from zico import celery  # noqa: F401

        post_migrate.connect(ensure_builtin_data, sender=self, dispatch_uid="zico.jobs.ensure_builtin_data")
