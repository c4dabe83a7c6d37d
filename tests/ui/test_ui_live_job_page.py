"""The job page follows a job through its whole life without a reload: every panel (curve, plan, log,
throughput, ETA, peak, queue position, status, cancel button) changes while it runs, the plan follows the
group when another job joins the device, and a finished job shows its final iteration, not the last live
sample's. The job is driven
by the workers' real messages (workers.link.Link -> Redis -> the control consumer's handlers), with the
scheduler's own steps (profiling, placement) done through the models as the scheduler does them."""
import time

import pytest
from playwright.sync_api import expect

from workers.link import Link
from zico.cluster.models import Placement
from zico.jobs.submission import submit_job
from zico.telemetry.consumer import ControlConsumer
from zico.jobs.lifecycle import transition

MIB = 1 << 20
CURVE = {"version": 1, "source": "allocator-trace", "device": "cuda:0", "iteration_s": 0.05,
         "persistent_bytes": 40 * MIB, "peak_bytes": 192 * MIB,
         "points": [[0.0, 40 * MIB], [0.3, 120 * MIB], [0.6, 192 * MIB], [0.8, 80 * MIB], [1.0, 40 * MIB]]}


@pytest.fixture
def worker(cluster, settings):
    """The device worker's Link and a control consumer, both on the test Redis."""
    link = Link(settings.REDIS_URL, cluster.key)
    consumer = ControlConsumer(settings.REDIS_URL, name="ui-live", block_ms=20)

    def send(msg, **fields):
        link.emit(msg, **fields)
        link.flush()
        for _ in range(3):
            consumer.step()
    return link, consumer, send


def _samples(link, cluster, job, t, allocated, iteration):
    link.publish_samples([
        {"job": job.pk, "device": cluster.key, "t": t, "allocated": allocated, "reserved": 0,
         "iteration": iteration, "phase": "forward"},
        {"job": None, "device": cluster.key, "t": t, "allocated": allocated, "reserved": 256 * MIB,
         "device_used": 300 * MIB, "budget": 72 << 30}])


@pytest.mark.django_db(transaction=True)
def test_every_panel_of_the_job_page_follows_the_run(page, sign_in, personas, cluster, worker):
    link, consumer, send = worker
    job = submit_job(tenant=personas.tenant, owner=personas.owner, workload="digits-cnn",
                     params={"iterations": 200}, name="live-panels")
    sign_in(personas.owner)
    page.goto(f"/jobs/{job.pk}/")
    page.evaluate("window.__same_page = true")
    expect(page.locator("#job-status")).to_have_text("queued")
    expect(page.locator("#panel-curve")).to_contain_text("No memory curve yet")
    expect(page.locator("#panel-plan")).to_contain_text("Not placed yet")
    expect(page.locator("#stat-eta")).to_contain_text("position 1 in the queue")
    expect(page.locator("#curve-chart")).to_be_hidden()

    transition(job, "profiling")                                   # the scheduler sends it to be profiled
    send("profile_done", job=job.pk, curve=CURVE)                 # the worker's curve
    expect(page.locator("#job-status")).to_have_text("ready", timeout=5000)
    expect(page.locator("#curve-chart")).to_be_visible(timeout=5000)
    expect(page.locator("#panel-curve")).to_contain_text("192.00 MiB")
    expect(page.locator("#panel-log")).to_contain_text("profiling → ready")

    placement = Placement.objects.create(device=cluster.device, plan={
        "job_ids": [job.pk], "mode": "independent", "predicted_slowdown": [1.0],
        "budget_bytes": 72 << 30, "predicted_peak_bytes": 192 * MIB, "sum_of_peaks_bytes": 192 * MIB})
    placement.jobs.add(job)
    transition(job, "placed", device=cluster.device)               # the scheduler places it
    expect(page.locator("#panel-plan")).to_contain_text(cluster.device.name, timeout=5000)
    expect(page.locator("#panel-plan .tag")).to_have_text("active")

    send("job_started", job=job.pk, placement=placement.pk, resumed_from=0, iterations=200)
    expect(page.locator("#job-status")).to_have_text("running", timeout=5000)
    expect(page.get_by_role("button", name="Cancel job")).to_be_visible()
    now = time.time()
    for k in range(10):                                           # 2 s of samples at 5 Hz, up to 192 MiB
        _samples(link, cluster, job, now - 2 + k * 0.2, (k + 1) * 19 * MIB + 2 * MIB, 10 + k)
    expect(page.locator('#job-summary dd[data-k="current_allocated_bytes"]')).to_have_text("192.00 MiB",
                                                                                          timeout=3000)
    send("job_progress", job=job.pk, placement=placement.pk, iteration=50, iterations=200, iterations_per_s=25.0)
    expect(page.locator("#stat-throughput")).to_contain_text("25.00", timeout=5000)
    expect(page.locator("#stat-eta")).to_contain_text("left")     # 150 iterations at 25 it/s
    expect(page.locator("#stat-progress")).to_contain_text("50")
    consumer._store(consumer.downsampler.flush(time.time() + 10))  # the stored timeline has the seconds now
    expect(page.locator("#stat-peak")).to_have_text("192.00 MiB", timeout=5000)
    expect(page.locator('#job-summary dd[data-k="iteration"]')).to_have_text("19")  # the live sample's

    # Another job joins the device: the scheduler opens a placement for it whose plan covers both (the running
    # job first); the running job stays linked to its own placement.
    partner = submit_job(tenant=personas.tenant, owner=personas.owner, workload="digits-cnn",
                         params={"iterations": 100, "batch_size": 16}, name="live-partner")
    transition(partner, "ready")
    group = Placement.objects.create(device=cluster.device, plan={
        "job_ids": [job.pk, partner.pk], "mode": "shift", "predicted_slowdown": [1.15, 1.2],
        "budget_bytes": 72 << 30, "predicted_peak_bytes": 300 * MIB, "sum_of_peaks_bytes": 384 * MIB})
    group.jobs.add(partner)
    transition(partner, "placed", device=cluster.device)
    plan = page.locator("#panel-plan")
    expect(plan).to_contain_text("live-partner", timeout=5000)
    expect(plan).to_contain_text("Its group changed")
    expect(plan.locator("tbody tr")).to_have_count(2)
    expect(plan.locator("tbody tr").nth(1)).to_contain_text("×1.20")
    expect(plan).to_contain_text("300.00 MiB")                                 # the group's predicted peak
    expect(plan).to_contain_text("shift")
    expect(page.locator("#panel-stats")).to_contain_text("predicted ×1.15")   # this job's, in the new plan

    send("job_finished", job=job.pk, placement=placement.pk, status="succeeded", reason="",
         metrics={"iterations_done": 200, "iterations_per_s": 24.0, "peak_allocated_bytes": 192 * MIB,
                  "peak_reserved_bytes": 64 * MIB, "mean_iteration_s": 0.07, "solo_iteration_s": 0.05,
                  "slowdown": 1.4, "slowdown_run": 1.25, "iterations_beside": 120, "predicted_slowdown": 1.0})
    expect(page.locator("#job-status")).to_have_text("succeeded", timeout=5000)
    expect(page.locator("#panel-plan .tag")).to_have_text("ended")
    expect(page.locator("#stat-slowdown")).to_have_text("×1.40")
    expect(page.locator("#panel-stats")).to_contain_text("measured over 120 iterations beside its neighbours; "
                                                         "×1.25 over the whole run")
    expect(page.locator("#panel-stats")).to_contain_text("predicted ×1.15")
    expect(page.locator('#job-summary dd[data-k="iteration"]')).to_have_text("200")  # final, not sample 19
    expect(page.locator("#stat-progress")).to_contain_text("200")
    expect(page.locator("#panel-plan")).to_contain_text("live-partner")    # the group it ended in
    expect(page.locator("#stat-peak-reserved")).to_contain_text("64.00 MiB")
    expect(page.locator("#panel-log")).to_contain_text("running → succeeded")
    expect(page.get_by_role("button", name="Cancel job")).to_have_count(0)
    assert page.evaluate("window.__same_page") is True             # all of it without a reload


@pytest.mark.django_db(transaction=True)
def test_a_cancelled_jobs_plan_no_longer_says_active(page, sign_in, personas, cluster):
    sign_in(personas.owner)
    page.goto(f"/jobs/{cluster.acme_job.pk}/")
    expect(page.locator("#panel-plan .tag")).to_have_text("active")
    page.once("dialog", lambda d: d.accept())
    page.get_by_role("button", name="Cancel job").click()
    expect(page.locator("#job-status")).to_have_text("cancelled")
    expect(page.locator("#panel-plan .tag")).to_have_text("ending")  # until the worker confirms the stop


@pytest.mark.django_db(transaction=True)
def test_the_job_chart_spans_the_job_and_names_its_axes(page, sign_in, personas, cluster):
    from datetime import timedelta
    from zico.jobs.models import Job
    Job.objects.filter(pk=cluster.acme_job.pk).update(created_at=cluster.acme_job.created_at - timedelta(minutes=2))
    cluster.acme_job.refresh_from_db()  # submitted before its stored timeline (30-60 s ago) began
    sign_in(personas.owner)
    page.goto(f"/jobs/{cluster.acme_job.pk}/")
    expect(page.locator("#window")).to_have_value("job")
    page.wait_for_function("() => echarts.getInstanceByDom(document.getElementById('job-chart'))"
                           ".getOption().series[0].data.length > 0")
    opt = page.evaluate("""() => {
        const o = echarts.getInstanceByDom(document.getElementById('job-chart')).getOption();
        const c = echarts.getInstanceByDom(document.getElementById('curve-chart')).getOption();
        return {min: o.xAxis[0].min, x: o.xAxis[0].name, y: o.yAxis[0].name, cx: c.xAxis[0].name, cy: c.yAxis[0].name};
    }""")
    assert opt["min"] == pytest.approx(cluster.acme_job.created_at.timestamp() * 1000, abs=1)  # from its submission
    assert opt["x"].startswith("time") and opt["y"] == "memory (GiB)"
    assert opt["cx"] == "time into the iteration (s)" and opt["cy"].startswith("memory (")
