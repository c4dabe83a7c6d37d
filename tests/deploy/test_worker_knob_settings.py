"""Worker knobs in settings: the lost-worker, retention and broker visibility values are read from the
environment (defaults otherwise) and a bad value is refused at start with a message naming the variable."""
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KNOBS = ["ZICO_TIMELINE_RETENTION_S", "ZICO_MAX_WORKER_LOSSES", "ZICO_WORKER_LOST_AFTER_S",
         "CELERY_BROKER_TRANSPORT_OPTIONS"]
PRINT_KNOBS = ("import django, json; django.setup(); from django.conf import settings as s; "
               f"print(json.dumps({{k: getattr(s, k) for k in {KNOBS!r}}}))")


def _settings(**env):
    """Start a fresh interpreter on zico.settings with ``env`` and return (returncode, stdout, stderr)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("ZICO_") and k != "DJANGO_SETTINGS_MODULE"}
    out = subprocess.run([sys.executable, "-c", PRINT_KNOBS], cwd=REPO, capture_output=True, text=True,
                         env={**base, "DEBUG": "1", "DJANGO_SETTINGS_MODULE": "zico.settings", **env})
    return out.returncode, out.stdout, out.stderr


def test_the_knobs_have_their_documented_defaults():
    rc, out, err = _settings()
    assert rc == 0, err
    assert json.loads(out) == {"ZICO_TIMELINE_RETENTION_S": 7 * 24 * 3600, "ZICO_MAX_WORKER_LOSSES": 3,
                               "ZICO_WORKER_LOST_AFTER_S": 15.0,
                               "CELERY_BROKER_TRANSPORT_OPTIONS": {"visibility_timeout": 12 * 3600}}


def test_the_knobs_are_read_from_the_environment():
    rc, out, err = _settings(ZICO_TIMELINE_RETENTION_S="60", ZICO_MAX_WORKER_LOSSES="5",
                             ZICO_WORKER_LOST_AFTER_S="2.5", ZICO_BROKER_VISIBILITY_TIMEOUT_S="90000")
    assert rc == 0, err
    assert json.loads(out) == {"ZICO_TIMELINE_RETENTION_S": 60, "ZICO_MAX_WORKER_LOSSES": 5,
                               "ZICO_WORKER_LOST_AFTER_S": 2.5,
                               "CELERY_BROKER_TRANSPORT_OPTIONS": {"visibility_timeout": 90000}}


def test_a_bad_value_is_refused_naming_the_variable():
    for var, bad in (("ZICO_MAX_WORKER_LOSSES", "three"), ("ZICO_WORKER_LOST_AFTER_S", "0"),
                     ("ZICO_BROKER_VISIBILITY_TIMEOUT_S", "-1"), ("ZICO_TIMELINE_RETENTION_S", "1.5")):
        rc, _, err = _settings(**{var: bad})
        assert rc != 0 and f"{var}={bad!r}: expected a positive" in err, err


def test_an_infinite_duration_is_refused():
    rc, _, err = _settings(ZICO_WORKER_LOST_AFTER_S="inf")
    assert rc != 0 and "ZICO_WORKER_LOST_AFTER_S='inf': expected a positive" in err, err


BOOLS = ["DEBUG", "SECURE_SSL_REDIRECT", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SECURE_HSTS_PRELOAD",
         "CELERY_TASK_ALWAYS_EAGER"]


def _bools(**env):
    base = {k: v for k, v in os.environ.items() if not k.startswith("ZICO_") and k != "DJANGO_SETTINGS_MODULE"
            and k not in BOOLS}
    code = ("import django, json; django.setup(); from django.conf import settings as s; "
            f"print(json.dumps({{k: getattr(s, k) for k in {BOOLS!r}}}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         env={**base, "DEBUG": "1", "DJANGO_SETTINGS_MODULE": "zico.settings", **env})
    return out.returncode, out.stdout, out.stderr


def test_boolean_settings_accept_every_documented_form():
    for text, value in (("off", False), ("OFF", False), ("no", False), ("0", False), ("false", False),
                        ("on", True), ("Yes", True), ("1", True), ("true", True)):
        rc, out, err = _bools(CELERY_TASK_ALWAYS_EAGER=text, SECURE_SSL_REDIRECT=text)
        assert rc == 0, err
        got = json.loads(out)
        assert got["CELERY_TASK_ALWAYS_EAGER"] is value and got["SECURE_SSL_REDIRECT"] is value, text


def test_a_malformed_boolean_is_refused_naming_it_not_read_as_false():
    for var in ("SECURE_SSL_REDIRECT", "DEBUG"):
        rc, _, err = _bools(**{var: "tru"})
        assert rc != 0 and f"{var}='tru': expected a boolean" in err and "on/off" in err, err
