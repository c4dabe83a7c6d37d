"""What a refused (429) user reads: the API's detail says the limit and the wait once, in one sentence; the
web submit form shows the rate-limit message, not a count of fields to fix."""
import re

from django.test import Client
from rest_framework.test import APIClient

from zico.jobs.models import Job

JOB = {"tenant": "acme", "workload": "digits-cnn", "params": {"iterations": 5}}


def test_an_api_429_names_the_limit_and_the_wait_once(personas, rates):
    c = APIClient()
    c.force_login(personas.viewer)
    with rates(api="1/d"):
        assert c.get("/api/tenants/").status_code == 200
        r = c.get("/api/tenants/")
    assert r.status_code == 429
    detail, wait = r.json()["detail"], r["Retry-After"]
    assert "Expected available" not in detail
    assert re.fullmatch(rf"rate limit exceeded: API requests by viewer \(limit 1/d\); retry in {wait} s", detail)


def test_the_web_submit_form_shows_the_rate_limit_message_when_refused(personas, rates):
    c = Client()
    c.force_login(personas.teammate)
    form = {"tenant": personas.tenant.pk, "workload": "digits-cnn", "name": "run", "param_batch_size": "32",
            "param_iterations": "40", "param_precision": "fp32", "priority": "0", "budget_gib": "",
            "action": "submit"}
    with rates(job_submit_user="1/d"):
        assert c.post("/jobs/new/", form).status_code == 302  # submitted
        r = c.post("/jobs/new/", form)
    assert r.status_code == 429
    page = r.content.decode()
    alert = page[page.index('id="form-errors"'):]
    alert = alert[: alert.index("</div>")]
    assert "Too many job submissions — try again in" in alert
    assert "Fix the" not in page
    assert Job.objects.count() == 1
