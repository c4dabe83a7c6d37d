"""Memory timelines over the REST API: the data behind the job and device charts, for scripts.

``GET /api/jobs/{id}/timeline/`` and ``GET /api/devices/{id}/timeline/`` answer what the pages poll
(``zico.web.timelines.job_memory`` / ``device_timeline``, the one builder of each), under the API's
authentication (API token or session), rate limit and tenant scoping: a job's timeline is readable by
its tenant's members and staff (others: 404); a device's by staff and by admins/owners of a tenant that
ran a job on it, who see only their own tenant's job bands (``zico.web.access``, the pages' rule).
"""
from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import OpenApiParameter
from rest_framework import exceptions

from zico.web import access
from zico.web.timelines import (DEFAULT_WINDOW_S, JOB_WINDOW, WINDOWS_S, device_timeline, job_memory,
                                 parse_job_window, parse_since_event, parse_window)

_SECONDS = ", ".join(map(str, WINDOWS_S))
WINDOW = OpenApiParameter("window", int, enum=list(WINDOWS_S), description=(
    f"seconds of history before now: one of {_SECONDS} (5 min, 15 min, 1 h, 6 h, 24 h; default "
    f"{DEFAULT_WINDOW_S}); anything else is a 400 naming window"))
JOB_WINDOW_PARAM = OpenApiParameter("window", str, enum=[JOB_WINDOW, *map(str, WINDOWS_S)], description=(
    f"'{JOB_WINDOW}': the job's own span, from its submission to its finish (or now), as its page shows by "
    f"default; or seconds of history before now, one of {_SECONDS} (default {DEFAULT_WINDOW_S}); anything else "
    "is a 400 naming window"))
CURSOR = OpenApiParameter("cursor", str, description="the previous answer's live.cursor: only what is new since")
SINCE_EVENT = OpenApiParameter("since_event", int, description="the last event id already seen (device only)")

JOB_TIMELINE = {
    "type": "object", "additionalProperties": True,
    "required": ["window", "job", "live", "points", "summary"],
    "properties": {
        "window": {"type": "integer", "description": "seconds"},
        "job": {"type": "object", "description": "the job's status figures"},
        "live": {"type": "object", "description": '{"ok": bool, "cursor": str | null}'},
        "points": {"type": "array", "items": {"type": "array"},
                   "description": "[t (unix s), allocated bytes, reserved bytes, iteration] per point"},
        "summary": {"type": "object"},
    },
}
DEVICE_TIMELINE = {
    "type": "object", "additionalProperties": True,
    "required": ["window", "device", "jobs", "series", "pool", "events", "live", "summary"],
    "properties": {
        "window": {"type": "integer", "description": "seconds"},
        "device": {"type": "object"},
        "jobs": {"type": "object", "description": "job id -> {id, label, tenant, status}; your tenants' jobs only"},
        "series": {"type": "object", "description": "job id -> [[t, allocated bytes], ...]"},
        "pool": {"type": "array", "items": {"type": "array"},
                 "description": "[t, allocated, reserved, budget] bytes of the whole pool"},
        "events": {"type": "array", "items": {"type": "object"}},
        "live": {"type": "object"},
        "summary": {"type": "object"},
    },
}


def _params(request, device: bool = False) -> dict:
    """The query parameters, parsed; a bad one is a 400 naming it (as the pages' JSON endpoints). A job's
    ``window`` may also be ``job`` (its own span); its default stays DEFAULT_WINDOW_S seconds."""
    q = request.query_params
    try:
        window = q.get("window")
        window_s = parse_window(window) if device or window in (None, "") else parse_job_window(window)
        out = {"window_s": window_s, "cursor": q.get("cursor") or None}
        if device:
            out["since_event"] = parse_since_event(q.get("since_event"))
    except ValueError as exc:
        name, _, message = str(exc).partition(": ")
        raise exceptions.ValidationError({name: [message]}) from exc
    return out


def _bad_cursor(call):
    try:
        return call()
    except ValueError as exc:  # a cursor the live reader cannot parse
        raise exceptions.ValidationError({"cursor": [str(exc)]}) from exc


def job_timeline_data(request, job) -> dict:
    """``job_memory`` of ``job`` (already scoped by the caller's queryset)."""
    p = _params(request)
    return _bad_cursor(lambda: job_memory(job, p["window_s"], p["cursor"]))


def device_timeline_data(request, pk) -> dict:
    """``device_timeline`` of device ``pk`` if the caller may open it (else 404), with their bands only."""
    try:
        device = access.device_for_timeline(request.user, int(pk))
    except (Http404, ValueError):
        raise exceptions.NotFound("no device timeline you may read") from None
    p = _params(request, device=True)
    return _bad_cursor(lambda: device_timeline(device, access.timeline_job_filter(request.user), p["window_s"],
                                               p["cursor"], p["since_event"]))
