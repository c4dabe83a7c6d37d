"""Zico settings: every value is read from the environment (django-environ).

The defaults run the single-machine demo (SQLite file under var/, Redis on localhost).
Production (docker-compose) sets DEBUG=0, SECRET_KEY, DATABASE_URL and ALLOWED_HOSTS;
see .env.example and the configuration table in README.md.
"""
from pathlib import Path
import socket

import environ

BASE_DIR = Path(__file__).resolve().parents[2]  # repository root
env = environ.Env()
env.read_env(BASE_DIR / ".env", overwrite=False)  # optional; real env vars win

_TRUE, _FALSE = ("1", "true", "on", "yes"), ("0", "false", "off", "no")


def _bool(var: str, default: bool) -> bool:
    """The env var ``var`` as a boolean: 1/0, true/false, on/off, yes/no (any case; unset or empty = ``default``).
    Anything else is ImproperlyConfigured naming the variable: django-environ's own ``env.bool`` reads
    every unknown word (``tru``, ``enabled``) as False, which for a security switch fails open."""
    raw = env.str(var, default="").strip()
    if not raw:
        return default
    if raw.lower() in _TRUE or raw.lower() in _FALSE:
        return raw.lower() in _TRUE
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(f"{var}={raw!r}: expected a boolean, one of 1/0, true/false, on/off, yes/no")


DEBUG = _bool("DEBUG", default=False)
# A secret key is required whenever DEBUG is off; the insecure default exists only for DEBUG.
SECRET_KEY = env.str("SECRET_KEY", default="insecure-dev-key-change-me" if DEBUG else "")
if not SECRET_KEY:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off (set DEBUG=1 for local development).")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

VAR_DIR = Path(env.str("ZICO_VAR_DIR", default=str(BASE_DIR / "var")))
# Where workloads may read their data (corpora, images); job params can only name paths under it.
ZICO_DATA_DIR = Path(env.str("ZICO_DATA_DIR", default=str(VAR_DIR / "data")))
# Where running jobs write checkpoints so that a job whose worker was lost resumes on requeue.
ZICO_CHECKPOINT_DIR = Path(env.str("ZICO_CHECKPOINT_DIR", default=str(VAR_DIR / "checkpoints")))
# Where CPU estimates of memory curves are kept (zico_workloads.curves.estimate_cache): written by ``manage.py curve
# estimate`` and the scheduler's background estimates, read by the submission check (zico.jobs.known).
ZICO_ESTIMATE_CACHE_DIR = Path(env.str("ZICO_ESTIMATE_CACHE_DIR", default=str(VAR_DIR / "cache" / "estimates")))
# Bearer token that lets a Prometheus server scrape /metrics without a staff session (empty: staff only).
ZICO_METRICS_TOKEN = env.str("ZICO_METRICS_TOKEN", default="")
# Host name used in queue names (cpu.<host>, gpu.<host>.<index>).
ZICO_HOST = env.str("ZICO_HOST", default=socket.gethostname().split(".")[0])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI files for /api/docs/, served locally (SWAGGER_UI_DIST below)
    "zico.tenants",
    "zico.cluster",
    "zico.jobs",
    "zico.telemetry",
    "zico.scheduling",
    "zico.web",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "zico.input_guard.RejectNulMiddleware",  # 400 for a NUL in the path or query (PostgreSQL refuses NUL)
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "zico.ratelimits.SignInRateLimitMiddleware",  # rate limits on web and admin sign-in POSTs
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "zico.urls"
WSGI_APPLICATION = "zico.wsgi.application"
ASGI_APPLICATION = "zico.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "frontend" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'zico.sqlite3'}")}
DATABASES["default"]["ATOMIC_REQUESTS"] = True
# Persistent connections (seconds a connection is kept; 0: one per request). Opening one costs 2-5 ms of wall
# time (TCP, PostgreSQL's backend start, Django's session setup) — a third of a job-list page's latency when
# each request connected (docs/operations.md, "Load: the job list API"). Checked before reuse, so a
# connection the server dropped is replaced rather than failing the request.
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # The demo's web server, scheduler and consumer share one file: wait for locks, write-ahead log.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    VAR_DIR.mkdir(parents=True, exist_ok=True)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "frontend" / "static"]
STATIC_ROOT = Path(env.str("STATIC_ROOT", default=str(VAR_DIR / "staticfiles")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# --- Security (``check --deploy`` clean when DEBUG is off) -------------------------------
SECURE_SSL_REDIRECT = _bool("SECURE_SSL_REDIRECT", default=not DEBUG)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SESSION_COOKIE_SECURE = _bool("SESSION_COOKIE_SECURE", default=not DEBUG)
CSRF_COOKIE_SECURE = _bool("CSRF_COOKIE_SECURE", default=not DEBUG)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0 if DEBUG else 3600)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = _bool("SECURE_HSTS_PRELOAD", default=not DEBUG)
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
# The worker-facing API (job code, output files) is reached by device workers at ZICO_WORKER_API_URL, inside
# the deployment's network, often over plain http: it is not redirected to https (its requests carry a
# short-lived job token, zico/api/worker.py).
SECURE_REDIRECT_EXEMPT = [r"^api/worker/"]

# --- REST API --------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: its WWW-Authenticate header makes refused requests 401, not 403.
        "zico.tenants.auth.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # Per API token (or per session user); see RATE_LIMITS below and zico/ratelimits.py.
    "DEFAULT_THROTTLE_CLASSES": ["zico.ratelimits.ApiUseThrottle"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # JSON nested too deep is a 400, not a RecursionError 500 (zico/api/parsers.py).
    "DEFAULT_PARSER_CLASSES": ["zico.api.parsers.DepthLimitedJSONParser", "rest_framework.parsers.FormParser",
                               "rest_framework.parsers.MultiPartParser"],
    "EXCEPTION_HANDLER": "zico.api.errors.exception_handler",  # + JSON 413 for bodies over the size limit
    "DEFAULT_PAGINATION_CLASS": "zico.api.pagination.BoundedLimitOffsetPagination",  # limit, offset bounded
    "PAGE_SIZE": 25,  # rows per page unless ?limit= (at most 1000): small pages keep list calls cheap
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Zico API",
    "DESCRIPTION": "Submit training jobs, set memory budgets, and read GPU memory telemetry.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # /api/docs/ loads Swagger UI from our static files (drf-spectacular-sidecar), not a CDN: works offline, pinned.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Every operation's 400/401/403/404/409/429 responses, written once (zico/api/schema.py).
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "zico.api.schema.add_error_responses"],
}

def _positive(var: str, default: int | float, cast=int):
    """The env var ``var`` as a positive ``cast`` (int or float), else ImproperlyConfigured naming it."""
    raw = env.str(var, default=str(default)).strip()
    try:
        value = cast(raw)
    except ValueError:
        value = None
    if value is None or not 0 < value < float("inf"):
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"{var}={raw!r}: expected a positive {cast.__name__}")
    return value


# --- Redis, Celery ----------------------------------------------------------------------
REDIS_URL = env.str("REDIS_URL", default="redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL)
CELERY_RESULT_BACKEND = env.str("CELERY_RESULT_BACKEND", default=REDIS_URL)
CELERY_TASK_ALWAYS_EAGER = _bool("CELERY_TASK_ALWAYS_EAGER", default=False)
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True  # a task whose worker dies is redelivered, not lost
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_RESULT_EXPIRES = 3600
# With acks_late a task is redelivered once it stays unacknowledged past the Redis transport's visibility
# timeout (kombu's default: 1 h), so a training task running longer would start a second time; 12 h here.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": _positive("ZICO_BROKER_VISIBILITY_TIMEOUT_S", 43200)}

# --- Workers and telemetry (control consumer, zico/telemetry) ----------------------------
# Seconds of stored memory timeline kept; older points are pruned every minute (default 7 days).
ZICO_TIMELINE_RETENTION_S = _positive("ZICO_TIMELINE_RETENTION_S", 7 * 24 * 3600)
# Losses (worker gone mid-job) after which a job is failed instead of requeued.
ZICO_MAX_WORKER_LOSSES = _positive("ZICO_MAX_WORKER_LOSSES", 3)
# Seconds without a changed heartbeat after which a device's worker is declared lost (float).
ZICO_WORKER_LOST_AFTER_S = _positive("ZICO_WORKER_LOST_AFTER_S", 15.0, float)
# Seconds a profiling run may take (float): the worker stops it at the first iteration boundary past it
# and the job fails with that reason; the control consumer fails a job still profiling at twice this.
ZICO_PROFILE_TIME_LIMIT_S = _positive("ZICO_PROFILE_TIME_LIMIT_S", 120.0, float)
# The platform's wall-clock limit of one job (seconds, float; default 24 h): the most a job's process may run,
# however its tenant's maximum or its own request are set (the least of the three holds, zico_contracts.walltime);
# the device agent stops a job past it and fails it naming the limit (docs/operations.md).
ZICO_JOB_TIME_LIMIT_S = _positive("ZICO_JOB_TIME_LIMIT_S", 24 * 3600.0, float)
# The default bound of a script job without a budget of its own while it is profiled beside jobs of known memory:
# this fraction of the device's budget at most (0 to 1; 0: such a job is profiled alone only, as before). The
# knob, its default (0.5) and why: zico_contracts.jobbudget; where it applies: Note [Where a script is profiled]
# in zico.scheduling.service; docs/operations.md.
def _default_budget_fraction() -> float:
    from zico_contracts import jobbudget

    try:
        return jobbudget.fraction(env.str(jobbudget.FRACTION_ENV, default=""))
    except jobbudget.BudgetKnobError as exc:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(str(exc)) from None


ZICO_JOB_DEFAULT_BUDGET_FRACTION = _default_budget_fraction()

# --- Code jobs: archives, outputs, logs, the worker-facing API (zico/jobs/code.py, docs/cli.md) ---------
# Uploaded code archives, content-addressed (<sha256>.tar.gz | .zip); limits: Note [Code archive limits]
# in zico_contracts/codearchive.py, sent to the worker in each run spec.
ZICO_CODE_DIR = Path(env.str("ZICO_CODE_DIR", default=str(VAR_DIR / "code")))
ZICO_CODE_MAX_BYTES = _positive("ZICO_CODE_MAX_BYTES", 64 << 20)                # one archive, bytes
ZICO_CODE_MAX_UNPACKED_BYTES = _positive("ZICO_CODE_MAX_UNPACKED_BYTES", 512 << 20)  # its files together
ZICO_CODE_MAX_FILES = _positive("ZICO_CODE_MAX_FILES", 10_000)                  # members of any kind
ZICO_CODE_MAX_RATIO = _positive("ZICO_CODE_MAX_RATIO", 200.0, float)            # unpacked / archive bytes
# Jobs' output files (<job id>/files/<path>) and stored logs (<job id>/log.jsonl).
ZICO_JOB_FILES_DIR = Path(env.str("ZICO_JOB_FILES_DIR", default=str(VAR_DIR / "jobfiles")))
ZICO_OUTPUT_MAX_FILES = _positive("ZICO_OUTPUT_MAX_FILES", 1000)               # output files per job
ZICO_OUTPUT_MAX_BYTES = _positive("ZICO_OUTPUT_MAX_BYTES", 1 << 30)            # output bytes per job
ZICO_OUTPUT_MAX_FILE_BYTES = _positive("ZICO_OUTPUT_MAX_FILE_BYTES", 256 << 20)  # one output file
ZICO_LOG_MAX_BYTES = _positive("ZICO_LOG_MAX_BYTES", 8 << 20)                  # a job's stored log (its tail)
# A PyTorch memory snapshot a user uploads as a job's curve (zico/jobs/snapshots.py), bytes (413 beyond); read and
# checked inside the request, so bounded well below the importer's own 128 MiB (docs/curves.md, upload limits).
ZICO_SNAPSHOT_MAX_BYTES = _positive("ZICO_SNAPSHOT_MAX_BYTES", 32 << 20)
# The web side's base URL as the device workers reach it (code download, output upload); no trailing slash.
ZICO_WORKER_API_URL = env.str("ZICO_WORKER_API_URL", default="http://127.0.0.1:8000").rstrip("/")
if not ZICO_WORKER_API_URL.startswith(("http://", "https://")):
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(f"ZICO_WORKER_API_URL={ZICO_WORKER_API_URL!r}: expected an http(s) URL")
# Seconds a job token (the worker's credential for one job) is valid from when its run spec was built;
# it is refused anyway once the job has ended more than ZICO_WORKER_UPLOAD_GRACE_S seconds ago.
ZICO_WORKER_TOKEN_TTL_S = _positive("ZICO_WORKER_TOKEN_TTL_S", 3 * 24 * 3600)
ZICO_WORKER_UPLOAD_GRACE_S = _positive("ZICO_WORKER_UPLOAD_GRACE_S", 600)

# --- Scheduler (zico/scheduling/service.py) -----------------------------------------------
# Bound on every co-located job's predicted slowdown (co-located iteration time over solo) that the
# memory-aware policy accepts (placement.policies.MemoryAware max_slowdown); a float >= 1, 1 = no slowdown.
def _slowdown_limit(var: str, default: float) -> float:
    raw = env.str(var, default=str(default)).strip()
    try:
        value = float(raw)
    except ValueError:
        value = None
    if value is None or not value >= 1 or value == float("inf"):
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"{var}={raw!r}: expected a number >= 1 (a slowdown factor, e.g. 1.6)")
    return value


ZICO_MAX_SLOWDOWN = _slowdown_limit("ZICO_MAX_SLOWDOWN", 1.6)
# Most jobs the memory-aware policy places on one device (placement.policies.MemoryAware max_group); an integer
# >= 1. Groups of three or more cost more planning per round (docs/placement.md, the shift search's cost).
ZICO_MAX_GROUP = _positive("ZICO_MAX_GROUP", 2)


def _budget_s(var: str, default: float) -> float | None:
    """The env var ``var`` as seconds >= 0, or None for ``off``; else ImproperlyConfigured naming it."""
    raw = env.str(var, default=str(default)).strip()
    if raw.lower() == "off":
        return None
    try:
        value = float(raw)
    except ValueError:
        value = None
    if value is None or not 0 <= value < float("inf"):
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"{var}={raw!r}: expected seconds >= 0 (e.g. 0.3) or off")
    return value


# CPU seconds a scheduling round's memory-aware policy may spend making new group plans (plans not in its plan
# cache) before the round places what it has decided; the next round continues the decision (Note [Planning
# budget] in placement.policies). ``off``: no limit. Keeps a cold round with groups of three under about 1 s.
ZICO_ROUND_PLANNING_BUDGET_S = _budget_s("ZICO_ROUND_PLANNING_BUDGET_S", 0.3)
# Whether ``runscheduler`` estimates, in a child process beside its rounds, the memory curve of a catalog job it
# sends to profiling when no estimate is stored (zico.scheduling.estimates); and the seconds one may take.
ZICO_SCHEDULER_ESTIMATES = _bool("ZICO_SCHEDULER_ESTIMATES", default=True)
ZICO_ESTIMATE_TIME_LIMIT_S = _positive("ZICO_ESTIMATE_TIME_LIMIT_S", 300.0, float)

# --- Rate limits (zico/ratelimits.py) -------------------------------------------------------
# Counters live in Redis (the "ratelimit" cache) so that every gunicorn process shares them. While Redis
# is unreachable each process counts on its own: no request is refused because Redis is down.
# A rate is "N/P" (django-ratelimit syntax): N requests per period P = [count]s|m|h|d, e.g. "10/5m";
# "off" switches a limit off.
def _rate(var: str, default: str) -> str | None:
    import re

    value = env.str(var, default=default).strip()
    if value.lower() == "off":
        return None
    if not re.fullmatch(r"[1-9][0-9]*/[0-9]*[smhd]", value):
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"{var}={value!r}: expected a rate like '10/m' or '30/5m', or 'off'")
    return value


RATE_LIMITS = {
    "signin_ip": _rate("ZICO_RATE_SIGNIN_IP", "30/5m"),             # sign-in POSTs (web, admin) per client IP
    "signin_user": _rate("ZICO_RATE_SIGNIN_USER", "10/5m"),         # sign-in POSTs per username tried
    "api": _rate("ZICO_RATE_API", "1200/m"),                        # API requests per token (or session user)
    "api_bad_token": _rate("ZICO_RATE_API_BAD_TOKEN", "30/m"),      # refused API tokens per client IP
    "job_submit_user": _rate("ZICO_RATE_JOB_SUBMIT_USER", "30/m"),  # POST /api/jobs/ per user
    "job_submit_tenant": _rate("ZICO_RATE_JOB_SUBMIT_TENANT", "120/m"),  # POST /api/jobs/ per tenant
}
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},  # Django's own default
    "ratelimit": {
        "BACKEND": "zico.ratelimits.FallbackRedisCache",  # django.core.cache.backends.redis.RedisCache + fallback
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "zico:rl",
        "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},  # seconds; a hung Redis costs little
    },
}
RATELIMIT_USE_CACHE = "ratelimit"
RATELIMIT_FAIL_OPEN = True  # a count that cannot be read never refuses a request
# Request.META key holding the client address; behind a reverse proxy e.g. HTTP_X_REAL_IP.
RATELIMIT_IP_META_KEY = env.str("ZICO_CLIENT_IP_META", default="REMOTE_ADDR")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
