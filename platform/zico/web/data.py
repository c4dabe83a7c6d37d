"""JSON endpoints the pages poll (once a second; see Note [Live updates by polling] in live.py).

All are tenant-scoped through :mod:`zico.web.access`: an object the user may not read is a 404, exactly
like a missing one. Signed-out requests get 401 (not a login redirect). Bad query parameters get 400
with the parameter named.
"""
from __future__ import annotations

from functools import wraps

from django.http import Http404, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from zico.api.conditional import with_body_etag

from . import access
from .job_metrics import job_metrics, parse_after
from .job_panels import job_statuses
from .timelines import device_timeline, job_memory, parse_job_window, parse_since_event, parse_window


def json_view(fn):
    """GET only, no caching, 401 when signed out, 404/400 as JSON."""
    @wraps(fn)
    @never_cache
    @require_GET
    def wrapper(request, *args, **kwargs):
        if not request.user.is_authenticated:
            return JsonResponse({"detail": "sign in first"}, status=401)
        try:
            return JsonResponse(fn(request, *args, **kwargs))
        except Http404:
            return JsonResponse({"detail": "not found"}, status=404)
        except ValueError as exc:
            return JsonResponse({"detail": str(exc)}, status=400)
    return wrapper


def with_etag(view):
    """``view``'s 200 with an ETag of its body, or 304 when the request's If-None-Match has it: the job list's
    poll then skips an unchanged answer (Note [Job list ETag] in zico/api/conditional.py; format.js)."""
    @wraps(view)
    def wrapper(request, *args, **kwargs):
        return with_body_etag(request, view(request, *args, **kwargs))
    return wrapper


@with_etag
@json_view
def jobs_status(request):
    """``{"jobs": [job_status, ...]}`` for the ids in ``?ids=1,2,3`` that the user may read (max 200); with an
    ETag (304 for an unchanged answer)."""
    raw = request.GET.get("ids", "")
    try:
        ids = [int(x) for x in raw.split(",") if x.strip()][:200]
    except ValueError:
        raise ValueError(f"ids: expected comma-separated job ids, got {raw!r}") from None
    jobs = access.visible_jobs(request.user).filter(pk__in=ids)
    return {"jobs": job_statuses(list(jobs))}


@json_view
def job_memory_data(request, pk: int):
    """A job's allocated/reserved bytes over time, stored + live (see timelines.job_memory)."""
    job = access.job_for(request.user, pk)
    return job_memory(job, parse_job_window(request.GET.get("window")), request.GET.get("cursor") or None)


@json_view
def job_metrics_data(request, pk: int):
    """A job's own metrics (``zico.log``) after ``?after=<cursor>``, for its charts (see job_metrics.job_metrics)."""
    job = access.job_for(request.user, pk)
    return job_metrics(job, parse_after(request.GET.get("after")))


@json_view
def device_timeline_data(request, pk: int):
    """A device's per-job bands, pool, budget and events (see timelines.device_timeline)."""
    device = access.device_for_timeline(request.user, pk)
    return device_timeline(device, access.timeline_job_filter(request.user),
                           parse_window(request.GET.get("window")), request.GET.get("cursor") or None,
                           parse_since_event(request.GET.get("since_event")))
