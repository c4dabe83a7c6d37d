"""The job list page's poll (/data/jobs/status.json via format.js) revalidates: an unchanged answer is a 304 that
the page skips, a changed one a 200 the page shows (Note [Job list ETag] in zico/api/conditional.py)."""
import pytest
from playwright.sync_api import expect

from zico.jobs.models import Job


def test_status_json_is_a_304_until_a_job_changes(cluster, client_for, personas):
    c = client_for(personas.owner)
    url = f"/data/jobs/status.json?ids={cluster.acme_job.pk},{cluster.rival_job.pk}"
    first = c.get(url)
    assert first.status_code == 200 and first["ETag"]
    again = c.get(url, HTTP_IF_NONE_MATCH=first["ETag"])
    assert again.status_code == 304 and again.content == b""
    Job.objects.filter(pk=cluster.rival_job.pk).update(progress_iteration=33)  # not the owner's: not shown
    assert c.get(url, HTTP_IF_NONE_MATCH=first["ETag"]).status_code == 304
    Job.objects.filter(pk=cluster.acme_job.pk).update(progress_iteration=44)
    changed = c.get(url, HTTP_IF_NONE_MATCH=first["ETag"])
    assert changed.status_code == 200 and changed["ETag"] != first["ETag"]
    assert c.get(url, HTTP_IF_NONE_MATCH=first["ETag"] + "x").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_the_job_list_page_revalidates_and_shows_a_change(page, sign_in, personas, cluster):
    answers = []
    page.on("response", lambda r: "status.json" in r.url and answers.append(
        (r.status, r.request.all_headers().get("if-none-match"))))
    sign_in(personas.owner)  # lands on the job list, "/"
    row = page.locator(f'tr[data-job="{cluster.acme_job.pk}"]')
    expect(row.locator('[data-field="status"]')).to_have_text("running")
    with page.expect_response(lambda r: "status.json" in r.url and r.status == 304, timeout=10_000):
        pass
    assert answers[0] == (200, None) and all(tag for status, tag in answers[1:]), answers
    Job.objects.filter(pk=cluster.acme_job.pk).update(progress_iteration=250)  # 250 of 500 iterations
    expect(row.locator('[data-field="iteration"]')).to_have_text("250 / 500 iterations", timeout=10_000)
