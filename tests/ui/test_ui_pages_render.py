"""Each page renders for its owner with the figures that matter (no browser; Django's test client)."""
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from zico.cluster.models import Device
from zico.jobs.models import Job
from zico.telemetry.models import TimelinePoint

pytestmark = pytest.mark.django_db


def test_sign_in_page_has_labelled_inputs(client):
    html = client.get("/login/").content.decode()
    assert '<label for="id_username">' in html and '<label for="id_password">' in html


def test_pages_redirect_signed_out_users_to_sign_in(client):
    for url in ("/", "/jobs/new/", "/cluster/", "/tenant/"):
        r = client.get(url)
        assert r.status_code == 302 and r.url.startswith("/login/"), url


def test_job_list_shows_status_progress_and_peak(cluster, client_for, personas):
    j = cluster.acme_job
    Job.objects.filter(pk=j.pk).update(progress_iteration=125, metrics={"iterations_per_s": 4.5,
                                                                        "peak_allocated_bytes": 3 * (1 << 30)})
    html = client_for(personas.owner).get("/").content.decode()
    assert "acme-secret-model" in html
    assert "125 / 500 iterations" in html
    assert "4.50 it/s" in html and "3.00 GiB" in html
    assert 'aria-valuenow="25"' in html


def test_job_detail_shows_curve_plan_delays_and_log(cluster, client_for, personas):
    html = client_for(personas.owner).get(f"/jobs/{cluster.acme_job.pk}/").content.decode()
    assert 'id="curve-data"' in html and "18.00 GiB" in html          # the curve and its peak
    assert "61.00 GiB" in html                                       # predicted peak of the sharing plan
    assert "a job of another tenant" in html                         # the co-located rival job stays anonymous
    assert "Delays imposed" in html and "0.05 s" in html             # the delay imposed on this job
    assert "Cancel job" in html


def test_cluster_overview_shows_allocated_and_reserved_versus_budget(cluster, client_for, personas):
    html = client_for(personas.owner).get("/cluster/").content.decode()
    assert "NVIDIA H100 80GB HBM3" in html
    assert '<dd data-field="allocated">16.00 GiB</dd>' in html       # stored pool allocated
    assert '<dd data-field="reserved">20.00 GiB</dd>' in html        # stored pool reserved (allocated + cache)
    assert "72.00 GiB" in html                                      # the budget
    assert '<dd data-field="of-budget">22%</dd>' in html             # allocated of budget, not reserved
    assert 'data-field="idle"' not in html                          # two jobs are placed on it


def test_cluster_overview_shows_an_idle_device_as_idle(cluster, client_for, personas):
    from datetime import timedelta
    from django.utils import timezone
    cluster.placement.end("test: jobs done")
    TimelinePoint.objects.filter(device=cluster.device).update(time=timezone.now() - timedelta(minutes=5))
    html = client_for(personas.owner).get("/cluster/").content.decode()
    assert 'data-field="idle"' in html
    assert '<dd data-field="allocated">—</dd>' in html and '<dd data-field="reserved">—</dd>' in html
    assert "No memory reading for 5" in html                        # a 5-minute-old reading is not "now"


def test_owner_cancels_a_running_job(cluster, client_for, personas):
    r = client_for(personas.owner).post(f"/jobs/{cluster.acme_job.pk}/cancel/")
    assert r.status_code == 302
    cluster.acme_job.refresh_from_db()
    assert cluster.acme_job.status == "cancelled"


def test_outsider_sees_the_styled_not_found_page(cluster, client_for, personas, settings):
    settings.DEBUG = False
    r = client_for(personas.outsider).get(f"/jobs/{cluster.acme_job.pk}/")
    html = r.content.decode()
    assert r.status_code == 404 and "Not found" in html and "Back to jobs" in html
    assert "acme-secret-model" not in html


def test_cluster_overview_query_count_does_not_grow_with_devices(cluster, client_for, personas):
    c = client_for(personas.owner)
    c.get("/cluster/")  # warm the session

    with CaptureQueriesContext(connection) as one:
        c.get("/cluster/")
    for i in range(1, 5):
        Device.objects.create(node=cluster.device.node, index=i, kind="gpu", name=f"Spare GPU {i}", uuid=f"GPU-x{i}",
                              total_bytes=1 << 34, budget_bytes=1 << 34)
    with CaptureQueriesContext(connection) as five:
        html = c.get("/cluster/").content.decode()
    assert all(f"Spare GPU {i}" in html for i in range(1, 5))
    assert len(five.captured_queries) == len(one.captured_queries)


def test_a_failed_jobs_reason_shows_its_headline_first_and_the_stderr_lines_below(cluster, client_for, personas):
    # as a device worker writes it (Note [Outcome of a job process] in workers.agent.agent)
    reason = ("ValueError: batch 2 has the wrong shape (train.py, line 12)\nexited with code 1\nlast 3 lines of stderr:\n"
              "Traceback (most recent call last):\n  File \"/job/code/train.py\", line 12, in <module>\n"
              "ValueError: batch 2 has the wrong shape")
    Job.objects.filter(pk=cluster.acme_job.pk).update(status="failed", failure_reason=reason)
    c = client_for(personas.owner)
    page = c.get(f"/jobs/{cluster.acme_job.pk}/").content.decode()
    assert '<span class="text-error" id="job-failure">ValueError: batch 2 has the wrong shape (train.py, line 12)</span>' \
        in page
    detail = page[page.index('id="job-failure-detail">'):]
    assert detail.startswith('id="job-failure-detail">exited with code 1\nlast 3 lines of stderr:\nTraceback')
    assert "ValueError: batch 2 has the wrong shape</pre>" in detail
    listing = c.get("/").content.decode()
    assert 'title="ValueError: batch 2 has the wrong shape (train.py, line 12)"' in listing
    assert "exited with code 1" not in listing  # the list shows the headline alone
