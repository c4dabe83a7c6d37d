"""Live telemetry for the pages: recent samples read from the Redis telemetry stream with a cursor.

Note [Live updates by polling]
    Pages poll a JSON endpoint once a second with the last stream id they saw (``cursor``); the endpoint
    answers the samples added after it (``XRANGE key (cursor +``). We poll rather than hold server-sent
    event streams because the web runs as gunicorn sync workers (docker-compose.yml): an open event stream
    would pin one of its three workers per open tab. A 1 s period keeps a sample's way from Redis to the
    chart under 2 s (issue 7), a cursor means no sample is missed or shown twice between polls, and a page
    recovers by itself after a Redis outage. Stream ids are Redis' millisecond clock, so a page's first read
    seeks straight to ``now - BACKFILL_S`` instead of scanning the stream; older points come from the database.
    Every poll scans the shared stream's new entries for its device or job: about 500 entries a second for
    100 jobs at 5 Hz, cheap at that scale; per-device streams would be the next step beyond it.

Note [Samples of an earlier deployment]
    The stream outlives the database: after a fresh deployment (new database, ids from 1 again) the last
    ``BACKFILL_S`` seconds of the stream may still hold the previous worker's samples under the same device
    key and job ids. Samples carry no run identity, so readers keep only samples taken after the row they
    show came to be: the device's registration (``Device.created_at``, written when its worker's
    ``worker_up`` is consumed) or the job's submission (``Job.created_at``), less ``REGISTRATION_GRACE_S``
    for the consumer's lag and the clock skew between a worker host and the web host. A worker restart in
    the same database keeps its device row, so its previous process's (real) readings still show.

Every read catches ``redis.RedisError`` and reports ``ok=False`` instead of raising, so a page still
serves the stored timeline (``zico.telemetry.models.TimelinePoint``) when Redis is down.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

import redis
from django.conf import settings

from zico_contracts import keys

log = logging.getLogger(__name__)

MAX_SAMPLES_PER_READ = 5000  # stream entries scanned per poll (~10 s of 100 jobs at 5 Hz)
BACKFILL_S = 120  # seconds of live samples a page's first read returns (older ones come from the database)
REGISTRATION_GRACE_S = 5.0  # samples this much older than their device's/job's row still show (Note above)
_clients: dict[str, redis.Redis] = {}


def taken_since(created_at) -> Callable[[dict[str, Any]], bool]:
    """A sample filter: the sample's ``t`` (unix s) is a number no older than ``created_at`` (an aware
    datetime: the device's registration or the job's submission) less ``REGISTRATION_GRACE_S``.
    See Note [Samples of an earlier deployment]."""
    since = created_at.timestamp() - REGISTRATION_GRACE_S

    def recent(sample: dict[str, Any]) -> bool:
        t = sample.get("t")
        return isinstance(t, (int, float)) and not isinstance(t, bool) and t >= since

    return recent


def client() -> redis.Redis:
    """One shared client per ``settings.REDIS_URL``, with short timeouts: a page never waits long on a
    dead Redis."""
    url = settings.REDIS_URL
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5,
                                             decode_responses=True)
    return _clients[url]


@dataclass
class LiveRead:
    """Result of one read: ``ok`` is False when Redis could not be reached (``samples`` is then empty)."""

    ok: bool
    cursor: str | None
    samples: list[dict[str, Any]] = field(default_factory=list)


def _valid_cursor(cursor: str | None) -> str | None:
    """A stream id ``<ms>-<seq>`` or None; raises ValueError naming the parameter otherwise."""
    if cursor in (None, ""):
        return None
    ms, _, seq = cursor.partition("-")
    if not (ms.isdigit() and seq.isdigit() and len(ms) <= 16 and len(seq) <= 16):
        raise ValueError(f"cursor: expected a stream id like '1700000000000-0', got {cursor!r}")
    return cursor


def read_samples(match: Callable[[dict[str, Any]], bool], cursor: str | None = None,
                 backfill_s: float = BACKFILL_S) -> LiveRead:
    """Samples from ``keys.TELEMETRY_STREAM`` after ``cursor`` for which ``match(sample)`` is true.

    Args:
        match: filter on the decoded sample dict (``job``, ``device``, ``t`` s, ``allocated``/``reserved``
            bytes, ``iteration``, ``phase``; device rows also ``device_used``/``budget`` bytes).
        cursor: the last stream id the caller saw; None for a first read, which covers the last
            ``backfill_s`` seconds by the Redis server's clock (so a skewed web host clock loses nothing).
    Returns:
        LiveRead with samples in stream order and the cursor to pass next time (the stream's last id, or
        the input cursor when nothing new arrived). At most ``MAX_SAMPLES_PER_READ`` entries are read, the
        newest ones: a reader that fell further behind skips ahead (a gap in a live chart beats a lag).
    Raises:
        ValueError: ``cursor`` is not a stream id.
    """
    cursor = _valid_cursor(cursor)
    r = client()
    try:
        if cursor is None:
            sec, usec = r.time()
            start = str(max(0, int((sec + usec / 1e6 - backfill_s) * 1000)))
        else:
            start = "(" + cursor
        entries = r.xrevrange(keys.TELEMETRY_STREAM, max="+", min=start, count=MAX_SAMPLES_PER_READ)[::-1]
        if not entries and cursor is None:  # nothing recent: continue from the stream's end, whatever it is
            last = r.xrevrange(keys.TELEMETRY_STREAM, count=1)
            cursor = last[0][0] if last else "0-0"
    except redis.RedisError as exc:
        log.info("live telemetry unavailable: %s", exc)
        return LiveRead(ok=False, cursor=cursor)
    out = []
    for _entry_id, fields in entries:
        try:
            sample = json.loads(fields.get("data", ""))
        except (TypeError, ValueError):
            continue  # a malformed entry is skipped, never shown
        if isinstance(sample, dict) and match(sample):
            out.append(sample)
    return LiveRead(ok=True, cursor=entries[-1][0] if entries else cursor, samples=out)


def ping() -> bool:
    """True when Redis answers."""
    try:
        return bool(client().ping())
    except redis.RedisError:
        return False

