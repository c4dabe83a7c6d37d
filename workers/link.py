"""The device worker's link to the web side through Redis: lifecycle messages, samples, heartbeats, control keys.

A device worker never touches the database (docs/architecture.md); everything it tells the web side goes through this
class, with the names declared in :mod:`zico_contracts.keys`.

Note [Redis outages]
    Lifecycle messages (job started / finished, delays, curves) must not be lost, so :meth:`Link.emit` only
    appends them to an in-memory outbox; :meth:`Link.flush` (called by the reporter thread several times a
    second) writes the outbox to the control stream in order and drops a message only after Redis accepted
    it. Samples are live data: when Redis is unreachable they are dropped, and the first successful write
    after an outage emits a ``telemetry_gap`` message (start, end) so the gap is recorded, not hidden.
    Nothing here raises on a Redis error; training goes on while Redis restarts.
"""
from __future__ import annotations

import collections
import json
import logging
import threading
import time
from typing import Any, Iterable

import redis

from zico_contracts import keys, lifecycle

log = logging.getLogger(__name__)

OUTBOX_MAX = 100_000  # lifecycle messages kept while Redis is down (a few MB at most)


class Link:
    """Redis connection of one device worker (thread-safe).

    Args:
        redis_url: e.g. ``redis://127.0.0.1:6379/0``.
        device: device key (:func:`zico_contracts.keys.device_key`).
        clock: seconds since the epoch (injectable for tests).
    """

    def __init__(self, redis_url: str, device: str, clock=time.time):
        keys.parse_device_key(device)
        self.device = device
        self.clock = clock
        self.redis = redis.Redis.from_url(redis_url, socket_timeout=2.0, socket_connect_timeout=2.0,
                                          health_check_interval=5)
        self._outbox: collections.deque[dict[str, Any]] = collections.deque(maxlen=OUTBOX_MAX)
        self._lock = threading.Lock()
        self._gap_start: float | None = None
        self._gap_msgs: list[dict[str, Any]] = []
        self.gaps: list[tuple[float, float]] = []  # (start, end) unix s of every outage seen

    # -- lifecycle messages (never lost while the process lives) ----------------------------
    def emit(self, msg_type: str, /, **fields: Any) -> None:
        """Queue a lifecycle message ``{"msg": msg_type, "t": ..., "device": ..., **fields}`` for the control
        consumer. Raises zico_contracts.lifecycle.LifecycleError (a ValueError naming the field) when it breaks
        the contract: an unknown kind, a missing, unknown or ill-typed field."""
        msg = lifecycle.validate({"t": self.clock(), "device": self.device, **fields, "msg": msg_type})
        with self._lock:
            self._outbox.append(msg)

    def flush(self) -> bool:
        """Write queued lifecycle messages to the control stream, oldest first. True when all were written."""
        with self._lock:
            if self._gap_start is not None and not self._ok(self.redis.ping):
                return False  # still down
            while self._gap_msgs:  # gaps first: they happened before anything queued during them
                self._outbox.appendleft(self._gap_msgs.pop())
            while self._outbox:
                msg = self._outbox[0]
                if not self._ok(lambda: self.redis.xadd(keys.CONTROL_STREAM, {"data": json.dumps(msg)})):
                    return False
                self._outbox.popleft()
        return True

    @property
    def pending(self) -> int:
        return len(self._outbox)

    # -- samples (lossy, gap recorded) ------------------------------------------------------------
    def publish_samples(self, samples: Iterable[dict[str, Any]]) -> bool:
        """Append samples to the telemetry stream (the pages read it live). Returns False if Redis was down.

        Each sample is a dict with ``job`` (id or None for the device row), ``device``, ``t`` (unix s),
        ``allocated``/``reserved`` (bytes), ``iteration``, ``phase`` (and device rows ``device_used``,
        ``budget``; bytes).
        """
        samples = list(samples)

        def write():
            pipe = self.redis.pipeline(transaction=False)
            for s in samples:
                data = json.dumps(s)
                pipe.xadd(keys.TELEMETRY_STREAM, {"data": data}, maxlen=keys.TELEMETRY_STREAM_MAXLEN,
                          approximate=True)
            pipe.execute()

        return self._ok(write) if samples else True

    # -- heartbeats and control keys --------------------------------------------------------------
    def heartbeat(self, info: dict[str, Any]) -> bool:
        """Refresh this worker's heartbeat key (expires after ``HEARTBEAT_TTL_S``)."""
        data = json.dumps({"t": self.clock(), **info})

        def write():
            pipe = self.redis.pipeline(transaction=False)
            pipe.set(keys.heartbeat_key(self.device), data, ex=keys.HEARTBEAT_TTL_S)
            pipe.sadd(keys.WORKERS_SET, self.device)
            pipe.execute()

        return self._ok(write)

    def budget_request(self) -> int | None:
        """Budget bytes the web side asks for, or None when unset or Redis is down."""
        value = self._read(lambda: self.redis.get(keys.budget_key(self.device)))
        try:
            return int(value) if value is not None else None
        except ValueError:
            log.warning("ignoring malformed budget %r in %s", value, keys.budget_key(self.device))
            return None

    def gate_headroom_request(self) -> float | None:
        """The gate headroom the device's row holds (a float in [0, 1)), or None when unset, malformed or Redis
        is down."""
        value = self._read(lambda: self.redis.get(keys.gate_headroom_key(self.device)))
        try:
            headroom = float(value) if value is not None else None
        except ValueError:
            headroom = -1.0
        if headroom is not None and not 0 <= headroom < 1:
            log.warning("ignoring malformed gate headroom %r in %s", value, keys.gate_headroom_key(self.device))
            return None
        return headroom

    def cancel_requested(self, job_id: int) -> bool:
        """True when the web side asked to cancel ``job_id`` (False if Redis is down: training goes on)."""
        return bool(self._read(lambda: self.redis.exists(keys.cancel_key(job_id))))

    def stop_requested(self, job_id: int, placement) -> str | None:
        """``"cancelled"`` when a user cancelled ``job_id``, ``"aborted"`` when the web side declared this
        run (``placement``) stale, else None (also None while Redis is down: training goes on)."""
        def read():
            pipe = self.redis.pipeline(transaction=False)
            pipe.exists(keys.cancel_key(job_id))
            pipe.exists(keys.abort_key(job_id, placement))
            return pipe.execute()

        flags = self._read(read)
        if not flags:
            return None
        return "cancelled" if flags[0] else "aborted" if flags[1] else None

    def done_outcome(self, job_id: int) -> dict[str, Any] | None:
        """The recorded outcome of a finished run of ``job_id``, if any (for idempotent redelivery)."""
        value = self._read(lambda: self.redis.get(keys.done_key(job_id)))
        return json.loads(value) if value else None

    def mark_done(self, job_id: int, outcome: dict[str, Any]) -> None:
        self._ok(lambda: self.redis.set(keys.done_key(job_id), json.dumps(outcome), ex=keys.DONE_TTL_S))

    def clear_done(self, job_id: int) -> None:
        self._ok(lambda: self.redis.delete(keys.done_key(job_id), keys.cancel_key(job_id)))

    # -- outage bookkeeping ------------------------------------------------------------------------
    def _read(self, fn):
        try:
            value = fn()
        except redis.RedisError as exc:
            self._down(exc)
            return None
        self._up()
        return value

    def _ok(self, fn) -> bool:
        try:
            fn()
        except redis.RedisError as exc:
            self._down(exc)
            return False
        self._up()
        return True

    def _down(self, exc: Exception) -> None:
        if self._gap_start is None:
            self._gap_start = self.clock()
            log.warning("Redis unreachable from device worker %s (%s); buffering lifecycle messages",
                        self.device, exc)

    def _up(self) -> None:
        if self._gap_start is not None:
            start, end = self._gap_start, self.clock()
            self._gap_start = None
            self.gaps.append((start, end))
            log.warning("Redis reachable again after %.1f s; recording the telemetry gap", end - start)
            self._gap_msgs.append({"msg": "telemetry_gap", "t": end, "device": self.device,
                                   "start": start, "end": end})
