"""The device timeline's legend: one entry per job id (two jobs of one name keep two entries and two
bands), Budget and Pool reserved always shown first however many jobs there are, and a job's colour the
same in every time range."""
import time

import pytest
from playwright.sync_api import expect

from zico.jobs.models import Job
from zico.jobs.submission import submit_job
from zico.jobs.lifecycle import transition

MIB = 1 << 20


def _jobs_with_samples(personas, cluster, publish, names):
    jobs = []
    for name in names:
        j = submit_job(tenant=personas.tenant, owner=personas.owner, workload="digits-cnn", params={}, name=name)
        for to in ("ready", "placed", "running"):
            transition(j, to, device=cluster.device)
        jobs.append(j)
    t = time.time()
    for k in range(3):
        for i, j in enumerate(jobs):
            publish(job=j.pk, device=cluster.key, t=t + k * 0.2, allocated=(i + 1) * MIB, reserved=0, iteration=k)
        publish(job=None, device=cluster.key, t=t + k * 0.2, allocated=sum(range(1, len(jobs) + 1)) * MIB,
                reserved=512 * MIB, budget=72 << 30)
    return jobs


def _legend(page):
    return page.locator("#device-legend button").all_inner_texts()


def _band_names(page):
    return page.evaluate("""() => echarts.getInstanceByDom(document.getElementById('device-chart')).getOption()
        .series.filter(s => s.id.startsWith('job-')).map(s => [s.id, s.name, s.color])""")


@pytest.mark.django_db(transaction=True)
def test_two_jobs_of_one_name_keep_two_legend_entries_and_bands(page, sign_in, personas, cluster, publish):
    a, b = _jobs_with_samples(personas, cluster, publish, ["same-name", "same-name"])
    sign_in(personas.owner)
    page.goto(f"/devices/{cluster.device.pk}/")
    expect(page.locator("#device-legend button", has_text=f"#{b.pk} same-name")).to_be_visible()
    entries = _legend(page)
    assert entries[:2] == ["Budget", "Pool reserved"]
    assert f"#{a.pk} same-name" in entries and f"#{b.pk} same-name" in entries
    bands = {sid: (name, color) for sid, name, color in _band_names(page)}
    assert bands[f"job-{a.pk}"][0] != bands[f"job-{b.pk}"][0] and bands[f"job-{a.pk}"][1] != bands[f"job-{b.pk}"][1]
    # a click hides just that job's band
    page.locator("#device-legend button", has_text=f"#{a.pk} same-name").click()
    expect(page.locator("#device-legend button", has_text=f"#{a.pk} same-name")).to_have_attribute("aria-pressed", "false")
    selected = page.evaluate("""() => echarts.getInstanceByDom(document.getElementById('device-chart'))
        .getOption().legend[0].selected""")
    assert selected[f"#{a.pk} same-name"] is False and selected.get(f"#{b.pk} same-name", True) is True


@pytest.mark.django_db(transaction=True)
def test_twenty_jobs_keep_budget_and_pool_visible_and_their_colours_across_ranges(page, sign_in, personas, cluster,
                                                                                   publish):
    jobs = _jobs_with_samples(personas, cluster, publish, [f"sweep-{i % 7}" for i in range(20)])
    sign_in(personas.owner)
    page.goto(f"/devices/{cluster.device.pk}/")
    expect(page.locator("#device-legend button", has_text=f"#{jobs[-1].pk} ")).to_be_visible()
    entries = _legend(page)
    assert entries[:2] == ["Budget", "Pool reserved"]
    assert sum(e.startswith("#") for e in entries) == 21   # the 20 jobs and the fixture's own acme job
    expect(page.get_by_role("button", name="Budget")).to_be_in_viewport()
    expect(page.get_by_role("button", name="Pool reserved")).to_be_in_viewport()
    before = {sid: color for sid, _, color in _band_names(page)}
    assert len(set(before.values())) == len(before)           # 21 bands, 21 colours
    page.get_by_role("button", name="1 h", exact=True).click()
    page.wait_for_function("() => echarts.getInstanceByDom(document.getElementById('device-chart'))"
                           ".getOption().xAxis[0].min < Date.now() - 3000 * 1000")   # the 1 h range is drawn
    after = {sid: color for sid, _, color in _band_names(page)}
    assert all(after[sid] == before[sid] for sid in before if sid in after) and len(after) == len(before)
