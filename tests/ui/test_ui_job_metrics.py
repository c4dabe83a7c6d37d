"""The job page's metrics: GET /data/jobs/{id}/metrics.json gives a job's stored figures (zico.log) by name after a
cursor, to its tenant's members only; the page carries the Metrics card that charts them."""
import pytest

from zico.jobs.submission import submit_job
from zico.telemetry.models import MetricPoint

pytestmark = pytest.mark.django_db


@pytest.fixture
def job(personas):
    j = submit_job(tenant=personas.tenant, owner=personas.teammate, workload="digits-cnn", params={}, name="m")
    MetricPoint.objects.bulk_create([MetricPoint(job=j, name=n, t=1000.0 + i, iteration=i, value=v)
                                     for i, (n, v) in enumerate([("loss", 2.0), ("acc", 0.1), ("loss", 1.0)])])
    return j


def test_metrics_come_by_name_in_order_and_only_newer_ones_after_the_cursor(client_for, personas, job):
    c = client_for(personas.teammate)
    d = c.get(f"/data/jobs/{job.pk}/metrics.json").json()
    assert d["series"] == {"loss": [[1000.0, 0, 2.0], [1002.0, 2, 1.0]], "acc": [[1001.0, 1, 0.1]]}
    assert list(d["series"]) == ["loss", "acc"] and d["more"] is False
    assert d["job"] == {"status": "queued", "finished": False}
    MetricPoint.objects.create(job=job, name="acc", t=1003.0, iteration=3, value=0.4)
    newer = c.get(f"/data/jobs/{job.pk}/metrics.json", {"after": d["cursor"]}).json()
    assert newer["series"] == {"acc": [[1003.0, 3, 0.4]]} and newer["cursor"] > d["cursor"]
    same = c.get(f"/data/jobs/{job.pk}/metrics.json", {"after": newer["cursor"]}).json()
    assert same["series"] == {} and same["cursor"] == newer["cursor"]


def test_metrics_are_the_tenants_and_a_bad_cursor_is_named(client_for, personas, job):
    assert client_for(personas.outsider).get(f"/data/jobs/{job.pk}/metrics.json").status_code == 404
    assert client_for(None).get(f"/data/jobs/{job.pk}/metrics.json").status_code == 401
    r = client_for(personas.teammate).get(f"/data/jobs/{job.pk}/metrics.json", {"after": "soon"})
    assert r.status_code == 400 and "after: expected a cursor" in r.json()["detail"]


def test_the_job_page_has_the_metrics_card(client_for, personas, job):
    html = client_for(personas.teammate).get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="metric-charts"' in html and f'data-url="/data/jobs/{job.pk}/metrics.json"' in html
