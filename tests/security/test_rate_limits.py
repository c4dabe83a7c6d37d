"""Rate limits: sign-in (web and admin), API use per token, refused tokens per IP, job submission per
user and per tenant; counters shared between processes through Redis; Redis down fails open."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client, RequestFactory, override_settings
from rest_framework.test import APIClient

from zico.jobs.models import Job
from zico.ratelimits import hit
from zico.tenants.models import ApiToken
from tests.support.tenants import PASSWORD

REPO = Path(__file__).resolve().parents[2]
JOB = {"tenant": "acme", "workload": "digits-cnn", "params": {"iterations": 5}}


def token_client(user, name="t"):
    _, raw = ApiToken.issue(user, name)
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return c


# Tested limits use day-long windows: a count cannot roll over to a fresh window in the middle of a test.
def assert_429(response, *, limit_text: str):
    assert response.status_code == 429, response.content
    wait = int(response["Retry-After"])
    assert 1 <= wait <= 86400
    assert limit_text in response.content.decode()
    return wait


# -- sign-in --------------------------------------------------------------------------------------
def test_web_signin_is_refused_after_the_per_username_limit_even_with_the_right_password(personas, rates):
    c = Client()
    with rates(signin_user="3/d", signin_ip="100/d"):
        for _ in range(3):
            assert c.post("/login/", {"username": "owner", "password": "wrong"}).status_code == 200
        refused = c.post("/login/", {"username": "OWNER ", "password": PASSWORD})  # case and spaces folded
        assert_429(refused, limit_text="Too many sign-in attempts for this account")
        assert "_auth_user_id" not in c.session
        # another account from the same address is not affected
        ok = c.post("/login/", {"username": "teammate", "password": PASSWORD})
        assert ok.status_code == 302 and c.session["_auth_user_id"] == str(personas.teammate.pk)


def test_admin_signin_is_limited_per_client_ip(personas, rates):
    c = Client(REMOTE_ADDR="10.1.2.3")
    with rates(signin_ip="2/d", signin_user="100/d"):
        for name in ("a", "b"):
            assert c.post("/admin/login/", {"username": name, "password": "x"}).status_code == 200
        assert_429(c.post("/admin/login/", {"username": "staff", "password": PASSWORD}),
                   limit_text="from your address")
        other = Client(REMOTE_ADDR="10.9.9.9").post("/admin/login/", {"username": "staff", "password": PASSWORD})
        assert other.status_code == 302  # a different address still signs in


def test_signin_page_get_is_never_counted(personas, rates):
    c = Client()
    with rates(signin_ip="1/d"):
        for _ in range(5):
            assert c.get("/login/").status_code == 200


def test_counters_are_shared_between_processes_through_redis(fresh_counters, rates):
    """Two hits here and two in another Python process against a 3/d limit: the fourth is refused."""
    script = f"""
import django, json
django.setup()
from django.conf import settings
from django.test import RequestFactory, override_settings
from zico.ratelimits import hit
caches = {{**settings.CACHES, "ratelimit": {{**settings.CACHES["ratelimit"], "KEY_PREFIX": {fresh_counters!r}}}}}
with override_settings(CACHES=caches, RATE_LIMITS={{**settings.RATE_LIMITS, "api": "3/d"}}):
    req = RequestFactory().get("/")
    print(json.dumps([hit(req, "api", "token:shared")[0] for _ in range(2)]))
"""
    req = RequestFactory().get("/")
    with rates(api="3/d"):
        assert [hit(req, "api", "token:shared")[0] for _ in range(2)] == [False, False]
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "zico.test_settings"}
        out = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout.strip().splitlines()[-1]) == [False, True]


# -- API ------------------------------------------------------------------------------------------
def test_api_use_is_limited_per_token(personas, rates):
    first, second = token_client(personas.teammate, "a"), token_client(personas.teammate, "b")
    with rates(api="3/d"):
        for _ in range(3):
            assert first.get("/api/jobs/").status_code == 200
        refused = first.get("/api/jobs/")
        assert_429(refused, limit_text="limit 3/d")
        assert "API token" in refused.json()["detail"]
        assert second.get("/api/jobs/").status_code == 200  # per token, not per user


def test_api_use_with_a_session_is_limited_per_user(personas, rates):
    c = APIClient()
    c.force_login(personas.viewer)
    with rates(api="2/d"):
        assert [c.get("/api/tenants/").status_code for _ in range(3)] == [200, 200, 429]


def test_retry_after_is_the_time_left_in_the_window(personas, rates):
    c = token_client(personas.teammate)
    with rates(api="1/m"):  # two requests milliseconds apart: both in one minute window but for ~1e-4 odds
        assert c.get("/api/workloads/").status_code == 200
        assert 1 <= assert_429(c.get("/api/workloads/"), limit_text="limit 1/m") <= 60


def test_a_limit_set_off_never_refuses(personas, rates):
    c = token_client(personas.teammate)
    with rates(api=None):
        assert {c.get("/api/workloads/").status_code for _ in range(8)} == {200}


def test_refused_tokens_are_counted_per_ip_and_answered_429_past_the_limit(personas, rates):
    bad = APIClient(REMOTE_ADDR="10.0.0.7")
    bad.credentials(HTTP_AUTHORIZATION="Bearer zico_deadbeef_notarealsecret")
    with rates(api_bad_token="2/d"):
        assert [bad.get("/api/jobs/").status_code for _ in range(2)] == [401, 401]
        assert_429(bad.get("/api/jobs/"), limit_text="refused API tokens")
        assert token_client(personas.owner).get("/api/jobs/").status_code == 200  # valid tokens still work


def test_job_submission_is_limited_per_user_and_a_refused_submission_stores_nothing(personas, rates):
    teammate, owner = token_client(personas.teammate), token_client(personas.owner)
    with rates(job_submit_user="2/d", job_submit_tenant="100/d"):
        assert [teammate.post("/api/jobs/", JOB, format="json").status_code for _ in range(2)] == [201, 201]
        assert_429(teammate.post("/api/jobs/", JOB, format="json"), limit_text="job submissions by teammate")
        assert Job.objects.filter(owner=personas.teammate).count() == 2
        assert owner.post("/api/jobs/", JOB, format="json").status_code == 201  # per user
        assert teammate.get("/api/jobs/").status_code == 200  # reading is not a submission


def test_job_submission_is_limited_per_tenant(personas, rates):
    with rates(job_submit_tenant="2/d", job_submit_user="100/d"):
        assert token_client(personas.owner).post("/api/jobs/", JOB, format="json").status_code == 201
        assert token_client(personas.teammate).post("/api/jobs/", JOB, format="json").status_code == 201
        refused = token_client(personas.admin).post("/api/jobs/", JOB, format="json")
        assert_429(refused, limit_text="job submissions to tenant acme")
        rival = {**JOB, "tenant": "rival"}
        assert token_client(personas.outsider).post("/api/jobs/", rival, format="json").status_code == 201
    assert Job.objects.filter(tenant=personas.tenant).count() == 2


# -- Redis down -----------------------------------------------------------------------------------
@pytest.fixture
def redis_down(fresh_counters):
    """The rate-limit cache pointed at a closed port on loopback (nothing listens on port 1)."""
    dead = {**settings.CACHES["ratelimit"], "LOCATION": "redis://127.0.0.1:1/0", "KEY_PREFIX": fresh_counters}
    with override_settings(CACHES={**settings.CACHES, "ratelimit": dead}):
        yield


def test_with_redis_down_requests_pass_and_limits_still_hold_per_process(personas, rates, redis_down, caplog):
    c = token_client(personas.teammate)
    with rates(api="1000/d", signin_user="2/d", signin_ip="100/d"):
        assert c.get("/api/jobs/").status_code == 200  # fail open: reads go on
        assert c.post("/api/jobs/", JOB, format="json").status_code == 201  # and so do writes
        web = Client()
        codes = [web.post("/login/", {"username": "viewer", "password": "x"}).status_code for _ in range(3)]
        assert codes == [200, 200, 429]  # counted in this process's memory meanwhile
    assert "Redis unreachable" in caplog.text


def test_a_malformed_rate_in_the_environment_is_refused_at_start_naming_the_variable():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "zico.test_settings", "ZICO_RATE_API": "lots"}
    out = subprocess.run([sys.executable, "manage.py", "check"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode != 0
    assert "ZICO_RATE_API='lots'" in out.stderr


def test_rejected_submissions_do_not_count_toward_the_submission_limits(personas, rates):
    teammate = token_client(personas.teammate)
    bad = {**JOB, "params": {"iterations": -1}}
    with rates(job_submit_user="2/d", job_submit_tenant="2/d"):
        assert [teammate.post("/api/jobs/", bad, format="json").status_code for _ in range(5)] == [400] * 5
        assert [teammate.post("/api/jobs/", JOB, format="json").status_code for _ in range(2)] == [201, 201]
        assert_429(teammate.post("/api/jobs/", JOB, format="json"), limit_text="job submissions by teammate")
        assert teammate.post("/api/jobs/", bad, format="json").status_code == 429  # over: refused before judging
    assert Job.objects.filter(owner=personas.teammate).count() == 2


def test_rejected_web_form_submissions_do_not_count_either(personas, rates):
    from django.test import Client

    web = Client()
    web.force_login(personas.teammate)
    form = {"workload": "digits-cnn", "tenant": str(personas.tenant.pk), "priority": "0", "name": "x"}
    with rates(job_submit_user="1/d", job_submit_tenant="100/d"):
        for _ in range(3):  # a budget the form refuses: not stored, not counted
            assert web.post("/jobs/new/", {**form, "budget_gib": "-1"}).status_code == 200
        assert web.post("/jobs/new/", form).status_code == 302
        assert web.post("/jobs/new/", form).status_code == 429
    assert Job.objects.filter(owner=personas.teammate).count() == 1
