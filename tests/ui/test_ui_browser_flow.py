"""Browser tests in headless Chromium against a live server: sign in, submit (invalid then valid), see the
job listed, watch a live sample reach the device timeline, and see stored data with a notice when Redis is down."""
import re
import time

import pytest
from playwright.sync_api import expect

from zico.jobs.models import Job
from tests.support.tenants import PASSWORD
from zico.jobs.lifecycle import transition

GIB = 1 << 30


@pytest.mark.django_db(transaction=True)
def test_sign_in_submit_invalid_then_valid_and_see_it_listed(page, personas):
    page.goto("/jobs/new/")                                    # signed out: sent to sign in, then back
    expect(page.get_by_label("Username")).to_be_focused()      # keyboard only from here
    page.keyboard.type(personas.teammate.get_username())
    page.keyboard.press("Tab")
    page.keyboard.type(PASSWORD)
    page.keyboard.press("Enter")
    page.wait_for_url(lambda url: url.endswith("/jobs/new/") and "login" not in url)
    page.goto("/")
    nav = page.get_by_role("navigation", name="Main")
    nav.get_by_role("link", name="Submit").click()
    page.get_by_label("Workload").select_option("digits-cnn")
    page.get_by_label("Job name").fill("browser run")
    page.get_by_label("Batch size").fill("0")
    page.get_by_role("button", name="Submit job").click()

    error = page.locator("#id_param_batch_size_error")
    expect(error).to_contain_text("greater than or equal to 1")
    expect(page.get_by_role("alert")).to_contain_text("The job was not submitted")
    expect(page.get_by_label("Batch size")).to_be_focused()   # keyboard users land on the first bad field
    assert not Job.objects.filter(name="browser run").exists()

    page.get_by_label("Batch size").fill("16")
    page.keyboard.press("Enter")                               # the form submits from the keyboard
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="browser run")
    assert job.params["batch_size"] == 16 and job.status == "queued"

    nav.get_by_role("link", name="Jobs").click()
    row = page.locator(f'tr[data-job="{job.pk}"]')
    expect(row).to_contain_text("browser run")
    expect(row.locator(".badge")).to_have_text("queued")
    page.evaluate("window.__same_page = true")
    transition(job, "profiling")                                # the list follows without a reload
    expect(row.locator(".badge")).to_have_text("profiling", timeout=5000)
    assert page.evaluate("window.__same_page") is True


@pytest.mark.django_db(transaction=True)
def test_device_timeline_shows_a_live_sample_within_two_seconds(page, sign_in, personas, cluster, publish):
    sign_in(personas.owner)
    page.goto(f"/devices/{cluster.device.pk}/")
    expect(page.locator("#live-state")).to_have_text("Live")
    expect(page.locator('#device-summary dd[data-k="jobs"]')).to_have_text("1")   # acme's band only
    count = int(page.locator("#sample-count").inner_text())

    t0 = time.monotonic()
    publish(job=None, device=cluster.key, allocated=33 * GIB, reserved=41 * GIB, budget=72 * GIB)
    publish(job=cluster.acme_job.pk, device=cluster.key, allocated=29 * GIB, reserved=30 * GIB, iteration=12)
    expect(page.locator('#device-summary dd[data-k="current_reserved_bytes"]')).to_have_text("41.00 GiB",
                                                                                              timeout=2000)
    latency = time.monotonic() - t0
    assert int(page.locator("#sample-count").inner_text()) == count + 2
    drawn = page.evaluate("""() => {
        const opt = echarts.getInstanceByDom(document.getElementById('device-chart')).getOption();
        return opt.series.map(s => [s.name, s.data.length ? s.data[s.data.length - 1][1] : null]);
    }""")
    assert [f"#{cluster.acme_job.pk} acme-secret-model", 29] in drawn and ["Pool reserved", 41] in drawn  # GiB
    assert not any(name.endswith("rival-secret-model") for name, _ in drawn)
    # the peak says against which budget it was measured: the budget in force at its second
    publish(job=None, device=cluster.key, allocated=33 * GIB, reserved=80 * GIB, budget=72 * GIB)
    expect(page.locator('#device-summary dd[data-k="peak_bytes"]')).to_have_text("80.00 GiB", timeout=2000)
    expect(page.locator('#device-summary dd[data-k="peak_budget_bytes"]')).to_have_text("72.00 GiB")
    expect(page.locator('#device-summary dd[data-k="peak_over_budget"]')).to_have_text("yes: 8.00 GiB past it")
    print(f"live sample reached the page {latency:.2f} s after it was published")


@pytest.mark.django_db(transaction=True)
def test_job_page_shows_stored_data_and_a_notice_when_redis_is_down(page, sign_in, personas, cluster, settings):
    sign_in(personas.owner)
    settings.REDIS_URL = "redis://127.0.0.1:1/0"   # nothing listens there
    page.goto(f"/jobs/{cluster.acme_job.pk}/")
    expect(page.locator("#live-notice")).to_be_visible()
    expect(page.locator("#live-notice")).to_contain_text("Live data is unavailable")
    expect(page.locator("#live-state")).to_have_text("Stored data only")
    page.get_by_label("Time range").select_option("300")
    expect(page.locator('#job-summary dd[data-k="peak_reserved_bytes"]')).to_have_text("12.00 GiB")
    expect(page.locator('#job-summary dd[data-k="peak_allocated_bytes"]')).to_have_text("10.00 GiB")
    page.wait_for_function("() => echarts.getInstanceByDom(document.getElementById('job-chart'))"
                           ".getOption().series[0].data.length === 30")   # one stored point per second


@pytest.mark.django_db(transaction=True)
def test_job_page_follows_live_samples_then_says_so_when_redis_goes_away(page, sign_in, personas, cluster,
                                                                        publish, settings):
    sign_in(personas.owner)
    page.goto(f"/jobs/{cluster.acme_job.pk}/")
    expect(page.locator("#live-state")).to_have_text("Live")
    publish(job=cluster.acme_job.pk, device=cluster.key, allocated=11 * GIB, reserved=13 * GIB, iteration=42)
    summary = page.locator("#job-summary")
    expect(summary.locator('dd[data-k="current_allocated_bytes"]')).to_have_text("11.00 GiB", timeout=2000)
    expect(summary.locator('dd[data-k="iteration"]')).to_have_text("42")
    expect(page.locator("#live-notice")).to_be_hidden()

    settings.REDIS_URL = "redis://127.0.0.1:1/0"   # Redis goes away while the page is open
    expect(page.locator("#live-notice")).to_be_visible(timeout=3000)
    expect(summary.locator('dd[data-k="peak_reserved_bytes"]')).to_have_text("13.00 GiB")   # what it had still shows
