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
