"""Rate limits: sign-in (web and admin), API use per token, bad API tokens per IP, job submission
per user and per tenant.

Counting is django-ratelimit's fixed-window counter (``django_ratelimit.core.get_usage``: an atomic
``add`` + ``incr`` per window) on the ``ratelimit`` cache, a Django ``RedisCache``, so every gunicorn
process shares one count. The API side plugs in as DRF throttle classes (``DEFAULT_THROTTLE_CLASSES``
and ``JobViewSet.get_throttles``); the sign-in side as a middleware, because Django's ``LoginView``
and ``admin.site.login`` are the views to guard and neither is ours to decorate.

Rates come from ``settings.RATE_LIMITS`` (one table, read from the environment, see README) and are
read at request time. A rate is ``"N/P"`` in django-ratelimit's syntax (``"10/5m"``: 10 per 5
minutes); ``None`` switches that limit off.

Note [Redis down]: the limits fail open, softly. While Redis is unreachable, :class:`FallbackRedisCache`
counts in process-local memory (and retries Redis every ``REDIS_RETRY_S`` seconds), so no request is
refused *because* Redis is down — reads and writes go on — yet sign-in and submission stay bounded per
process (the cluster-wide bound becomes rate × gunicorn processes). Counts made during the outage are
not carried over to Redis.

A refused request gets HTTP 429 with ``Retry-After`` (seconds) and a message naming the limit.
"""
from __future__ import annotations

import html
import logging
import threading
import time

from django.conf import settings
from django.core.cache.backends.locmem import LocMemCache
from django.core.cache.backends.redis import RedisCache
from django.http import HttpResponse
from django_ratelimit.core import get_usage
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from rest_framework import exceptions
from rest_framework.throttling import BaseThrottle

log = logging.getLogger(__name__)

REDIS_RETRY_S = 5.0  # while Redis is down, how long a process counts locally before trying Redis again
SIGNIN_VIEWS = ("login", "admin:login")  # URL names of the sign-in views (web form, Django admin)


# -- the shared counter store ---------------------------------------------------------------------
class FallbackRedisCache(RedisCache):
    """Django's ``RedisCache`` that switches to a process-local ``LocMemCache`` while Redis is unreachable.

    Only the operations the counters use are wrapped: ``add``, ``get``, ``set``, ``incr``, ``delete``.
    A ``redis`` ConnectionError/TimeoutError marks Redis down for ``REDIS_RETRY_S`` seconds (process-wide)
    and logs one warning per outage; the call is then served by the local cache.
    """

    _down_until = 0.0  # time.monotonic() until which this process skips Redis (shared by all threads)
    _lock = threading.Lock()

    def __init__(self, server, params):
        super().__init__(server, params)
        self._local = LocMemCache(f"zico-ratelimit-fallback:{self.key_prefix}",
                                  {"OPTIONS": {"MAX_ENTRIES": 100_000}, "KEY_PREFIX": self.key_prefix})

    def _call(self, name: str, *args, **kwargs):
        cls = type(self)
        if time.monotonic() >= cls._down_until:
            try:
                op = self._redis_incr if name == "incr" else getattr(super(), name)
                return op(*args, **kwargs)
            except (RedisConnectionError, RedisTimeoutError) as exc:
                with cls._lock:
                    if time.monotonic() >= cls._down_until:
                        log.warning("rate-limit cache: Redis unreachable (%s); counting per process for %.0f s",
                                    exc, REDIS_RETRY_S)
                    cls._down_until = time.monotonic() + REDIS_RETRY_S
        return getattr(self._local, name)(*args, **kwargs)

    def add(self, *args, **kwargs):
        return self._call("add", *args, **kwargs)

    def get(self, *args, **kwargs):
        return self._call("get", *args, **kwargs)

    def set(self, *args, **kwargs):
        return self._call("set", *args, **kwargs)

    def incr(self, *args, **kwargs):
        return self._call("incr", *args, **kwargs)

    # Django's RedisCache.incr is EXISTS then INCRBY: two round trips on every counted request after the
    # window's first. This is one (a script), with the same contract: ValueError for a missing key.
    _INCR_EXISTING = ("if redis.call('EXISTS', KEYS[1]) == 1 then return redis.call('INCRBY', KEYS[1], ARGV[1]) "
                      "end return false")
    _incr_script = None  # redis-py Script (EVALSHA, loaded on first use), shared by the process

    def _redis_incr(self, key, delta: int = 1, version=None) -> int:
        key = self.make_and_validate_key(key, version=version)
        client = self._cache.get_client(key, write=True)
        if type(self)._incr_script is None:
            type(self)._incr_script = client.register_script(self._INCR_EXISTING)
        count = type(self)._incr_script(keys=[key], args=[delta], client=client)
        if count is None:
            raise ValueError(f"Key '{key}' not found.")
        return count

    def delete(self, *args, **kwargs):
        return self._call("delete", *args, **kwargs)


# -- counting -------------------------------------------------------------------------------------
def hit(request, limit: str, key: str | None, *, increment: bool = True) -> tuple[bool, int]:
    """Count one request against ``settings.RATE_LIMITS[limit]`` for ``key`` (None: the client IP, read by
    django-ratelimit from ``RATELIMIT_IP_META_KEY``, default ``REMOTE_ADDR``, IPv6 masked to /64).

    Returns (over the limit, seconds until the window ends). With ``increment=False`` nothing is counted
    and "over" means one more request would be over (the window's count already is the limit). A limit
    set to None never refuses. Raises KeyError naming ``limit`` when it is not in ``settings.RATE_LIMITS``.
    """
    rate = settings.RATE_LIMITS[limit]
    if rate is None:
        return False, 0
    usage = get_usage(request, group=f"zico.{limit}", key="ip" if key is None else (lambda _g, _r: key),
                      rate=rate, increment=increment)
    if usage is None:  # RATELIMIT_ENABLE off, or the count could not be read (fail open)
        return False, 0
    over = usage["should_limit"] if increment else usage["count"] >= usage["limit"]
    return over, max(1, int(usage["time_left"]))


def _throttled(limit: str, what: str, wait: int) -> exceptions.Throttled:
    """A 429 whose detail is one sentence naming the limit and the wait; ``wait`` (s) also sets Retry-After.

    ``wait`` is set after construction: passed to ``Throttled(wait=...)`` DRF would append its own
    "Expected available in N seconds." to our detail, saying the wait twice.
    """
    rate = settings.RATE_LIMITS[limit]
    exc = exceptions.Throttled(detail=f"rate limit exceeded: {what} (limit {rate}); retry in {wait} s")
    exc.wait = wait  # APIView.handle_exception turns it into the Retry-After header
    return exc


# -- DRF throttles ----------------------------------------------------------------------------------
class ApiUseThrottle(BaseThrottle):
    """Every API request: limit ``api`` per API token, or per user when signed in with a session.

    Anonymous requests are not counted here (every endpoint needs authentication, and refused tokens
    are counted per IP by :func:`count_bad_token`). Raises ``Throttled`` (429 + Retry-After) when over.
    """

    def allow_request(self, request, view) -> bool:
        from zico.tenants.models import ApiToken

        if isinstance(request.auth, ApiToken):
            key, what = f"token:{request.auth.pk}", f"requests with API token {request.auth.prefix}"
        elif getattr(request.user, "is_authenticated", False):
            key, what = f"user:{request.user.pk}", f"API requests by {request.user.get_username()}"
        else:
            return True
        over, wait = hit(request, "api", key)
        if over:
            raise _throttled("api", what, wait)
        return True


# Note [Only accepted submissions count]
#     The submission limits (``job_submit_user``, ``job_submit_tenant``) count jobs stored, not requests:
#     a submission is first checked against the counts (nothing counted), judged, and counted only once
#     the job is stored (:func:`count_job_submission`). A user fixing a spec after a few 400s is not
#     locked out. Concurrent submissions may each pass the check before any is counted, so a burst can
#     overshoot a limit by the number of requests in flight at once; sequential ones never do.
class JobSubmitUserThrottle(BaseThrottle):
    """POST /api/jobs/: refuse (429) once ``job_submit_user`` accepted submissions were made by this user
    in the window. Counts nothing itself (Note [Only accepted submissions count])."""

    def allow_request(self, request, view) -> bool:
        user = request.user
        if not getattr(user, "is_authenticated", False):
            return True
        over, wait = hit(request, "job_submit_user", f"user:{user.pk}", increment=False)
        if over:
            raise _throttled("job_submit_user", f"job submissions by {user.get_username()}", wait)
        return True


def check_job_submit_tenant(request, tenant) -> None:
    """Raise ``Throttled`` once ``tenant`` had ``job_submit_tenant`` accepted submissions in the window;
    counts nothing (Note [Only accepted submissions count]).

    Called by the jobs API once the tenant is known (DRF throttles run before the body is parsed).
    """
    over, wait = hit(request, "job_submit_tenant", f"tenant:{tenant.pk}", increment=False)
    if over:
        raise _throttled("job_submit_tenant", f"job submissions to tenant {tenant.slug}", wait)


def job_submit_wait(request, tenant=None) -> int:
    """Seconds to wait before ``request.user`` may submit (to ``tenant``, when known); 0 when allowed now.
    Counts nothing: the web form's check, the same as the API's throttle and tenant check."""
    over, wait = hit(request, "job_submit_user", f"user:{request.user.pk}", increment=False)
    if not over and tenant is not None:
        over, wait = hit(request, "job_submit_tenant", f"tenant:{tenant.pk}", increment=False)
    return wait if over else 0


def count_job_submission(request, tenant) -> None:
    """Count one accepted submission by ``request.user`` to ``tenant`` (both limits); never refuses."""
    hit(request, "job_submit_user", f"user:{request.user.pk}")
    hit(request, "job_submit_tenant", f"tenant:{tenant.pk}")


def count_bad_token(request) -> None:
    """Count one refused API token from the client's IP (limit ``api_bad_token``); raise ``Throttled``
    (429 instead of 401) once over, so guessing tokens costs an attacker the window."""
    over, wait = hit(request, "api_bad_token", None)
    if over:
        raise _throttled("api_bad_token", "refused API tokens from your address", wait)


# -- sign-in -------------------------------------------------------------------------------------
class SignInRateLimitMiddleware:
    """Limit sign-in POSTs to the views named in ``SIGNIN_VIEWS``: ``signin_ip`` per client IP and
    ``signin_user`` per username tried (case-folded). Both count every attempt, good or bad; a refused
    attempt is a 429 page with Retry-After and never reaches the password check."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view_func, view_args, view_kwargs):
        match = request.resolver_match
        if request.method != "POST" or match is None or match.view_name not in SIGNIN_VIEWS:
            return None
        username = request.POST.get("username", "").strip().casefold()[:150]
        over_ip, wait_ip = hit(request, "signin_ip", None)
        over_user, wait_user = hit(request, "signin_user", f"user:{username}") if username else (False, 0)
        if not (over_ip or over_user):
            return None
        wait = max(wait_ip if over_ip else 0, wait_user if over_user else 0)
        what = "for this account" if over_user else "from your address"
        log.warning("sign-in refused %s (remote %s, username %r)", what, request.META.get("REMOTE_ADDR"), username)
        body = (f"<!doctype html><title>Too many sign-in attempts</title><h1>Too many sign-in attempts</h1>"
                f"<p>Too many sign-in attempts {html.escape(what)}. Try again in {wait} seconds.</p>")
        return HttpResponse(body, status=429, headers={"Retry-After": str(wait)})
