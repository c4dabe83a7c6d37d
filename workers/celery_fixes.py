"""A targeted fix for a kombu Redis-transport bug that stops a Celery worker when Redis restarts.

Note [Celery worker dies when Redis restarts]
    With celery 5.7 / kombu 5.7, when the broker connection drops the worker consumer first *collects* the
    connection (``Connection.collect`` sets the transport's ``client`` to None) and then closes it inside
    ``ignore_errors``. Closing a Redis channel may build connection parameters from ``transport.client``
    (``Channel._connparams``), which raises ``AttributeError: 'NoneType' object has no attribute 'hostname'``
    — not a connection error, so ``ignore_errors`` lets it through and the worker logs "Unrecoverable error"
    and stops consuming. (Similar reports: celery/kombu#582, #659.)

    The fix: a channel whose connection was already collected has no connection parameters, which *is* a
    connection error, so ``_connparams`` raises ``redis.ConnectionError`` there; ``ignore_errors`` swallows
    it and the consumer reconnects as designed. Applied once by ``workers.bootstrap``; checked by
    tests/integration/test_redis_restart_mid_run.py (the worker takes a new task after the restart).
"""
from __future__ import annotations


def patch_kombu_redis_collected_channel() -> None:
    """Make ``kombu.transport.redis.Channel._connparams`` raise ``redis.ConnectionError`` (not
    AttributeError) once its connection was collected. Idempotent."""
    import redis
    from kombu.transport import redis as kombu_redis

    original = kombu_redis.Channel._connparams
    if getattr(original, "zico_patched", False):
        return

    def _connparams(self, asynchronous=False):
        if getattr(self.connection, "client", None) is None:
            raise redis.ConnectionError("broker connection already collected; nothing to reconnect from here")
        return original(self, asynchronous)

    _connparams.zico_patched = True
    kombu_redis.Channel._connparams = _connparams
