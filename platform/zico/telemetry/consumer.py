"""The control consumer: reads the device workers' Redis streams and writes the database.

One loop (``manage.py runconsumer``), in the healthchecks style of long-running management commands:

* ``zico:control`` lifecycle messages -> :mod:`zico.telemetry.handlers` (job status, metrics, curves, gaps);
* ``zico:telemetry`` samples -> :class:`~zico.telemetry.downsample.Downsampler` -> TimelinePoint rows;
* every second: lost-worker detection (:mod:`zico.telemetry.liveness`), device budgets and job
  cancellations pushed to Redis for the workers to read; every minute: timeline retention.

Both streams are read through the consumer group ``control`` and a message is acknowledged only after it
was handled, so a consumer killed mid-batch re-reads its pending messages on restart. A Redis outage is
waited out (the loop reconnects, recreates the group if Redis lost it, and grants workers a fresh heartbeat
grace period); it never ends the process.

Note [Database outages]
    A PostgreSQL restart or outage is waited out as well: an OperationalError or InterfaceError in a step
    drops the connection (the next step opens a new one), keeps the downsampled points that were not stored (retried
    first, at most ``UNSTORED_MAX``), and re-reads this consumer's pending (un-acked) messages, so a
    lifecycle message or sample read during the outage is handled once the database is back. Nothing is
    lost while Redis keeps the streams; workers never see the outage (they do not use the database), and
    heartbeats get a fresh grace period on recovery so a long outage never reads as dead workers.
    Any other database error is about the message, not the database (a value out of range, a constraint):
    that message, or that batch of points, is logged and dropped, so one bad message cannot block the stream.
"""
from __future__ import annotations

import json
import logging
import signal
import socket
import time

import redis
from django.db import DatabaseError, InterfaceError, OperationalError, close_old_connections, connection

from zico.cluster.models import Device, Placement
from zico.jobs.models import Event
from zico.jobs.transitions import JobStatus as S
from zico_contracts import keys

from . import handlers
from .downsample import Downsampler
from .liveness import Liveness, fail_overdue_profiles
from .models import prune

log = logging.getLogger(__name__)
STREAMS = (keys.CONTROL_STREAM, keys.TELEMETRY_STREAM)
UNSTORED_MAX = 100_000  # downsampled points kept for retry while the database is down
DB_DOWN = (OperationalError, InterfaceError)  # the database is unreachable or restarting: wait, retry


class ControlConsumer:
    """Reads both streams, handles messages, runs the periodic checks. Call :meth:`run` (blocks)."""

    def __init__(self, redis_url: str, name: str | None = None, lost_after_s: float | None = None,
                 block_ms: int = 200):
        self.redis = redis.Redis.from_url(redis_url, socket_timeout=5.0, socket_connect_timeout=2.0)
        self.name = name or f"{socket.gethostname()}-{id(self):x}"
        self.block_ms = block_ms
        self.downsampler = Downsampler()
        self.liveness = Liveness(lost_after_s)
        self.devices: dict = {}
        self._stopping = False
        self._redis_down_since: float | None = None
        self._db_down_since: float | None = None
        self._unstored: list = []  # points whose insert failed (database down), retried first
        self._next_tick = 0.0
        self._next_prune = 0.0
        self._pending_first = True  # re-read our own un-acked messages once after (re)start
        self.handled = 0
        self.stored = 0

    def stop(self, *_args) -> None:
        self._stopping = True

    # -- loop -------------------------------------------------------------------------------------------
    def run(self, max_seconds: float | None = None) -> None:
        """Consume until SIGTERM/SIGINT (or ``max_seconds``)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                signal.signal(sig, self.stop)
            except ValueError:  # not the main thread (tests)
                pass
        end = time.monotonic() + max_seconds if max_seconds else None
        self.liveness.grace()
        while not self._stopping and (end is None or time.monotonic() < end):
            self.step()
        self._store(self.downsampler.flush(time.time() + 3600))  # last open seconds
        log.info("control consumer stopped: %d messages handled, %d timeline points stored",
                 self.handled, self.stored)

    def step(self) -> None:
        """One read of both streams plus the periodic checks; survives Redis and database outages."""
        close_old_connections()
        try:
            self._ensure_groups()
            self._read_once()
            if time.monotonic() >= self._next_tick:
                self._next_tick = time.monotonic() + 1.0
                self.tick()
            if self._redis_down_since is not None:
                log.warning("Redis reachable again after %.1f s", time.monotonic() - self._redis_down_since)
                self._record_outage("redis", self._redis_down_since)
                self._redis_down_since = None
                self.liveness.grace()
            if self._db_down_since is not None and self._store_pending():
                log.warning("database reachable again after %.1f s; pending messages handled",
                            time.monotonic() - self._db_down_since)
                self._record_outage("database", self._db_down_since)
                self._db_down_since = None
                self.liveness.grace()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            if self._redis_down_since is None:
                self._redis_down_since = time.monotonic()
                log.warning("Redis unreachable (%s); retrying", exc)
            self._groups_ok = False
            time.sleep(0.5)
        except DB_DOWN as exc:  # Note [Database outages]
            if self._db_down_since is None:
                self._db_down_since = time.monotonic()
                log.warning("database unreachable (%s); retrying, messages stay pending in Redis",
                            str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
            try:
                connection.close()  # the next step opens a fresh connection
            except DB_DOWN:
                pass
            self._pending_first = True  # re-read what was read but not acked
            time.sleep(0.5)

    def _record_outage(self, service: str, since_monotonic: float) -> None:
        """Write one ``outage`` Event for a Redis or database outage that just ended (seconds, wall times)."""
        seconds = time.monotonic() - since_monotonic
        end = time.time()
        Event.record(Event.Kind.OUTAGE, service=service, seconds=round(seconds, 2),
                     start=round(end - seconds, 3), end=round(end, 3), seen_by=f"control consumer {self.name}")

    def _store_pending(self) -> bool:
        """Store the points kept from the outage; True once none is left (raises OperationalError if still down)."""
        connection.ensure_connection()
        self._store([])
        return not self._unstored

    _groups_ok = False

    def _ensure_groups(self) -> None:
        if self._groups_ok:
            return
        for stream in STREAMS:
            try:
                self.redis.xgroup_create(stream, keys.CONTROL_GROUP, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
        self._groups_ok = True
        self._pending_first = True

    def _read_once(self) -> None:
        ids = {s: ("0" if self._pending_first else ">") for s in STREAMS}
        try:
            reply = self.redis.xreadgroup(keys.CONTROL_GROUP, self.name, ids, count=500,
                                          block=None if self._pending_first else self.block_ms)
        except redis.ResponseError as exc:
            # NOGROUP: Redis restarted without its data; UNBLOCKED: the stream was deleted (e.g. FLUSHDB) while we
            # waited on it. Either way, recreate the groups and read again.
            if "NOGROUP" in str(exc) or "UNBLOCKED" in str(exc):
                self._groups_ok = False
                return
            raise
        self._pending_first = False
        for stream, entries in reply or []:
            stream = stream.decode() if isinstance(stream, bytes) else stream
            if not entries:
                continue
            if stream == keys.CONTROL_STREAM:
                self._handle_control(entries)
            else:
                self._handle_samples(entries)

    def _decode(self, fields) -> dict | None:
        raw = fields.get(b"data") or fields.get("data")
        try:
            # NaN and the infinities (Python's json writes them; a diverged loss is NaN) become null: JSON has
            # no such numbers and PostgreSQL's jsonb refuses them, which would refuse the whole message
            return json.loads(raw, parse_constant=lambda _name: None)
        except (TypeError, ValueError):
            log.warning("dropping malformed stream entry %r", fields)
            return None

    def _handle_control(self, entries) -> None:
        for msg_id, fields in entries:
            msg = self._decode(fields)
            if msg is not None:
                try:
                    handlers.handle(msg, self.redis)
                except DB_DOWN:
                    raise  # left un-acked: handled after the outage
                except (KeyError, ValueError, TypeError, DatabaseError) as exc:
                    log.warning("dropping malformed control message %r: %s", msg, exc)
                self.handled += 1
            self.redis.xack(keys.CONTROL_STREAM, keys.CONTROL_GROUP, msg_id)

    def _handle_samples(self, entries) -> None:
        samples = [m for m in (self._decode(f) for _, f in entries) if m is not None]
        self._store(self.downsampler.add(samples))
        self.redis.xack(keys.TELEMETRY_STREAM, keys.CONTROL_GROUP, *[i for i, _ in entries])

    def _store(self, points) -> None:
        points = self._unstored + list(points)
        self._unstored = []
        if not points:
            return
        try:
            self.stored += handlers.store_points(points, self.devices)
        except DB_DOWN:
            self._unstored = points[-UNSTORED_MAX:]
            raise
        except DatabaseError:
            log.exception("dropping %d timeline points the database refused", len(points))

    # -- periodic work ------------------------------------------------------------------------------
    def tick(self) -> None:
        """Store finished seconds, detect lost workers and overdue profiling runs, push budgets and
        cancellations; prune hourly data."""
        now = time.time()
        self._store(self.downsampler.flush(now))
        self.liveness.check(self.redis)
        fail_overdue_profiles(self.redis)
        self.push_budgets()
        self.push_cancellations()
        if time.monotonic() >= self._next_prune:
            self._next_prune = time.monotonic() + 60
            prune()

    def push_budgets(self) -> None:
        """Write every online device's budget bytes and gate headroom where its worker reads them."""
        pipe = self.redis.pipeline(transaction=False)
        for d in Device.objects.select_related("node").exclude(status="offline"):
            pipe.set(keys.budget_key(d.key), d.budget_bytes)
            pipe.set(keys.gate_headroom_key(d.key), repr(float(d.gate_headroom)))
        pipe.execute()

    def push_cancellations(self) -> None:
        """Ask workers to stop jobs that were cancelled while their placement is still active."""
        ids = Placement.objects.active().filter(jobs__status=S.CANCELLED).values_list("jobs__pk", flat=True)
        for job_id in set(ids):
            keys.request_cancel(self.redis, job_id)
