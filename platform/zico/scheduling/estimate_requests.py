"""CPU estimates users ask for through the API (``POST /api/workloads/{key}/estimate/``, ``zico curve estimate``):
answered from the estimate cache when stored, else queued in Redis for the scheduler service, whose background child
process computes them (zico.scheduling.estimates). A request never runs one.

Note [Estimates users ask for]
    A cold estimate takes 5-30 s of CPU and imports torch (zico.jobs.known), more than a request may take, and
    its memory is not the web server's to spend. So the API reads the estimate cache only
    (``known.stored_estimate``: one JSON file, no torch) and, on a miss, records the request in the Redis hash
    ``keys.ESTIMATE_REQUESTS`` (at most ``keys.ESTIMATE_REQUESTS_MAX`` waiting; beyond, a 503 with Retry-After)
    and answers 202. Each round, the scheduler service (``runscheduler`` with ``ZICO_SCHEDULER_ESTIMATES`` on)
    hands the waiting requests to its BackgroundEstimates, which runs them one at a time, after the jobs' own
    already queued, each killed past ``ZICO_ESTIMATE_TIME_LIMIT_S``, into the cache the submission check and the
    scheduler read: the figure a user is shown is the one their jobs are judged by. When one ends the scheduler
    removes the request; a failure is kept for ``keys.ESTIMATE_FAILURE_TTL_S`` under
    ``keys.estimate_failure_key`` and answered until then (asking again does not queue it again). Without such a
    scheduler a request waits; the answer says since when.

    What has an estimate: catalog workloads, for the CUDA target ``known.ESTIMATE_DEVICE`` (fake tensors run the
    catalog's own training step). Workloads registered through entry points are not cached (their code lies
    outside the cache's key), so they are refused. A user's own script cannot be estimated without running it:
    it is profiled, or a snapshot is attached (zico.jobs.snapshots).
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from zico.jobs import known
from zico_contracts import keys

log = logging.getLogger(__name__)


class QueueFull(Exception):
    """``keys.ESTIMATE_REQUESTS_MAX`` requests are already waiting."""


@dataclass(frozen=True)
class Answer:
    """What is known of one estimate: ``status`` is ``stored`` (``curve`` set), ``pending`` (``requested_at``, unix
    seconds) or ``failed`` (``error``)."""

    status: str
    curve: Any = None
    requested_at: float | None = None
    error: str = ""


def request_key(workload: str, params: dict[str, Any]) -> str:
    """The request's name in Redis: equal for identical estimates (the workload and its full params)."""
    return hashlib.sha256(json.dumps(known.params_key(workload, params)).encode()).hexdigest()[:32]


def ask(r, workload: str, params: dict[str, Any]) -> Answer:
    """The stored estimate of ``workload`` with its full ``params``, or the state of the request for it, queued
    now if there is none (Note [Estimates users ask for]). Raises QueueFull, or redis errors."""
    curve = known.stored_estimate(workload, params)
    if curve is not None:
        return Answer("stored", curve=curve)
    key = request_key(workload, params)
    failure = r.get(keys.estimate_failure_key(key))
    if failure is not None:
        return Answer("failed", error=failure.decode(errors="replace"))
    waiting = r.hget(keys.ESTIMATE_REQUESTS, key)
    if waiting is None:
        if r.hlen(keys.ESTIMATE_REQUESTS) >= keys.ESTIMATE_REQUESTS_MAX:
            raise QueueFull(f"{keys.ESTIMATE_REQUESTS_MAX} estimates are already waiting; ask again later")
        body = json.dumps({"workload": workload, "params": params, "requested_at": time.time()})
        r.hsetnx(keys.ESTIMATE_REQUESTS, key, body)
        waiting = r.hget(keys.ESTIMATE_REQUESTS, key) or body.encode()
    try:
        requested_at = float(json.loads(waiting)["requested_at"])
    except (ValueError, KeyError, TypeError):
        requested_at = None
    return Answer("pending", requested_at=requested_at)


def waiting(r) -> list[tuple[str, str, dict[str, Any]]]:
    """The waiting requests, oldest first: ``(key, workload, params)``; an unreadable one is dropped."""
    out = []
    for key, body in r.hgetall(keys.ESTIMATE_REQUESTS).items():
        try:
            d = json.loads(body)
            out.append((float(d["requested_at"]), key.decode(), str(d["workload"]), dict(d["params"])))
        except (ValueError, KeyError, TypeError):
            log.warning("estimate request %r unreadable; dropped", key)
            r.hdel(keys.ESTIMATE_REQUESTS, key)
    return [(k, w, p) for _, k, w, p in sorted(out)]


def finish(r, workload: str, params: dict[str, Any], error: str | None = None) -> None:
    """The estimate asked for has ended: remove the request; remember ``error`` when it failed."""
    key = request_key(workload, params)
    pipe = r.pipeline()
    if error is not None:
        pipe.set(keys.estimate_failure_key(key), error[:2000], ex=keys.ESTIMATE_FAILURE_TTL_S)
    pipe.hdel(keys.ESTIMATE_REQUESTS, key)
    pipe.execute()
