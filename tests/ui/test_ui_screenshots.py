"""Every page in a real browser on a realistic cluster, with no console error; saves the screenshots.

Three jobs share one 80 GiB GPU under a 72 GiB budget, each with a forward/backward memory sawtooth and a
time shift so their peaks do not coincide (the Zico idea). Older minutes come from the stored timeline,
the last two from live samples in Redis. PNGs go to ``$ZICO_SCREENSHOT_DIR`` when set (the README's
docs/screenshots are made with ``ZICO_SCREENSHOT_DIR=docs/screenshots``), else to a temporary folder.
"""
import os
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from playwright.sync_api import expect

from zico.cluster.models import Device, Node, Placement
from zico.jobs.models import Event, Job, MemoryProfile
from zico.jobs.submission import submit_job
from zico_contracts import keys
from zico.telemetry.models import TimelinePoint
from zico.jobs.lifecycle import transition

GIB = 1 << 30
PERIOD_S = 4.0
# (name, workload, tenant attr, owner attr, persistent GiB, peak GiB, time shift s)
JOBS = [("resnet50-imagenet-bs256", "resnet50", "tenant", "owner", 7, 27, 0.0),
        ("bert-base-mlm", "bert-base", "tenant", "teammate", 9, 25, 1.4),
        ("gpt2-small-finetune", "gpt2-small", "other_tenant", "outsider", 6, 21, 2.7)]


def bytes_at(t: float, persistent: float, peak: float, shift: float) -> int:
    """Memory of one job at time t: forward ramp (55% of the iteration), backward fall (40%), optimizer step."""
    f = ((t - shift) % PERIOD_S) / PERIOD_S
    if f < 0.55:
        g = persistent + (peak - persistent) * (f / 0.55) ** 0.8
    elif f < 0.95:
        g = peak - (peak - persistent) * ((f - 0.55) / 0.4)
    else:
        g = persistent + 0.6
    return int(g * GIB)


def build_cluster(p, publish, now: float):
    node = Node.objects.create(host="node-a")
    dev = Device.objects.create(node=node, index=0, kind="gpu", name="NVIDIA A100-SXM4-80GB", uuid="GPU-shot-0",
                                total_bytes=80 * GIB, budget_bytes=80 * GIB)
    Device.objects.create(node=node, index=1, kind="gpu", name="NVIDIA A100-SXM4-80GB", uuid="GPU-shot-1",
                          total_bytes=80 * GIB, budget_bytes=64 * GIB)
    key = keys.device_key("gpu", "node-a", 0)
    jobs = []
    for name, workload, tenant, owner, pers, peak, shift in JOBS:
        params = {"iterations": 5000, "data": "synthetic"}
        j = submit_job(tenant=getattr(p, tenant), owner=getattr(p, owner), workload=workload, params=params,
                       budget_bytes=(peak + 3) * GIB, name=name)
        for to in ("ready", "placed", "running"):
            transition(j, to, device=dev)
        pts = [[i / 50, bytes_at(i / 50 * PERIOD_S, pers, peak, 0)] for i in range(51)]
        MemoryProfile.record(j, {"version": 1, "source": "allocator-trace", "device": "cuda:0",
                                 "iteration_s": PERIOD_S, "persistent_bytes": pers * GIB,
                                 "peak_bytes": max(b for _, b in pts), "points": pts})
        jobs.append((j, pers, peak, shift))
    placement = Placement.objects.create(device=dev, plan={
        "job_ids": [j.pk for j, *_ in jobs], "mode": "shift",
        "budget_bytes": 72 * GIB, "predicted_peak_bytes": 58 * GIB})
    placement.jobs.set([j for j, *_ in jobs])
    # the story starts 15 min ago: the device registered and the jobs were submitted before their samples
    # (live charts drop samples older than their device or job row: zico.web.live)
    Device.objects.filter(node=node).update(created_at=_dt(now - 3600))
    Job.objects.filter(pk__in=[j.pk for j, *_ in jobs]).update(created_at=_dt(now - 900))
    Event.objects.filter(kind=Event.Kind.STATUS_CHANGE).update(time=_dt(now - 890))
    for i, (j, *_rest) in enumerate(jobs):
        Event.objects.filter(pk=Event.record(Event.Kind.PLACEMENT, job=j, device=dev, placement=placement.pk).pk) \
            .update(time=_dt(now - 880 + 20 * i))
    dev.set_budget(72 * GIB)
    Event.objects.filter(kind=Event.Kind.BUDGET_CHANGE).update(time=_dt(now - 610))
    for k, t in enumerate(range(int(now) - 560, int(now), 75)):
        j = jobs[1 + k % 2][0]
        ev = Event.record(Event.Kind.DELAY, job=j, device=dev, iteration=int((t - now + 900) / PERIOD_S),
                          delay_s=round(0.08 + 0.05 * (k % 4), 2), reason="gated: predicted peak above budget")
        Event.objects.filter(pk=ev.pk).update(time=_dt(t))
    for t in range(int(now) - 600, int(now) - 120, 5):  # under load: a report every 5 s, one marker a minute
        ev = Event.record(Event.Kind.OOM_PREVENTED, job=jobs[0][0], device=dev, count=3, waited_s=0.4, overruns=0)
        Event.objects.filter(pk=ev.pk).update(time=_dt(t))
    # stored timeline: 1 point per second (the largest of the second), the last 15 min
    rows = []
    for s in range(int(now) - 900, int(now)):  # the consumer stores every second; live samples overlay the last 2 min
        when = _dt(s)
        # as the control consumer stores it: the pool point is the largest sum within the second, each job's
        # point its own largest bytes plus its bytes at that peak instant (Note [Stacking per-second points])
        sums = [sum(bytes_at(s + k / 5, pers, peak, shift) for _, pers, peak, shift in jobs) for k in range(5)]
        total_a, k_peak = max(sums), sums.index(max(sums))
        for j, pers, peak, shift in jobs:
            a = max(bytes_at(s + k / 5, pers, peak, shift) for k in range(5))
            rows.append(TimelinePoint(device=dev, job=j, second=s, time=when, allocated_bytes=a,
                                      allocated_at_peak_bytes=bytes_at(s + k_peak / 5, pers, peak, shift),
                                      reserved_bytes=a + GIB, iteration=int((s - now + 900) / PERIOD_S)))
        budget = 80 * GIB if s < now - 610 else 72 * GIB
        rows.append(TimelinePoint(device=dev, job=None, second=s, time=when, allocated_bytes=total_a,
                                  reserved_bytes=total_a + 4 * GIB, budget_bytes=budget))
    TimelinePoint.objects.bulk_create(rows)
    # live samples, 5 Hz for the last 2 minutes
    for k in range(600):
        t = now - 120 + k * 0.2
        total = 0
        for j, pers, peak, shift in jobs:
            a = bytes_at(t, pers, peak, shift)
            total += a
            publish(job=j.pk, device=key, t=t, allocated=a, reserved=a + GIB,
                    iteration=int((t - now + 900) / PERIOD_S))
        publish(job=None, device=key, t=t, allocated=total, reserved=total + 4 * GIB, budget=72 * GIB)
    Job.objects.filter(pk=jobs[0][0].pk).update(progress_iteration=3120, metrics={
        "iterations_per_s": 0.25, "peak_allocated_bytes": 27 * GIB, "delay_s": 0.0})
    Job.objects.filter(pk=jobs[1][0].pk).update(progress_iteration=1875, metrics={
        "iterations_per_s": 0.24, "peak_allocated_bytes": 25 * GIB, "delay_s": 1.9})
    return dev, jobs


def more_jobs(p):
    done = submit_job(tenant=p.tenant, owner=p.owner, workload="digits-cnn", params={}, name="digits-baseline")
    for to in ("ready", "placed", "running"):
        transition(done, to)
    transition(done, "succeeded", metrics={"iterations_per_s": 41.3, "peak_allocated_bytes": 310 * (1 << 20)})
    Job.objects.filter(pk=done.pk).update(progress_iteration=150)
    failed = submit_job(tenant=p.tenant, owner=p.teammate, workload="resnet18", params={"batch_size": 512},
                        name="resnet18-sweep-3")
    transition(failed, "failed", reason="profiling: CUDA out of memory at batch 512")
    submit_job(tenant=p.tenant, owner=p.owner, workload="resnet18", params={"batch_size": 128},
               name="resnet18-ablation")
    prof = submit_job(tenant=p.tenant, owner=p.teammate, workload="gpt2-small", params={"data": "synthetic"},
                      name="gpt2-distill")
    transition(prof, "profiling")


def _dt(s: float) -> datetime:
    return datetime.fromtimestamp(s, tz=timezone.utc)


def out_dir(tmp_path) -> Path:
    d = Path(os.environ.get("ZICO_SCREENSHOT_DIR") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_every_page_renders_in_the_browser_and_is_captured(page, sign_in, personas, publish, tmp_path, settings):
    settings.ZICO_DATA_DIR = tmp_path / "data"            # the text workloads' default corpus must exist
    (tmp_path / "data" / "corpus").mkdir(parents=True)
    (tmp_path / "data" / "corpus" / "python-docs.txt").write_text("def f():\n    return 1\n")
    now = time.time()
    dev, jobs = build_cluster(personas, publish, now)
    more_jobs(personas)
    out = out_dir(tmp_path)
    sign_in(personas.owner)
    shot = lambda name: page.screenshot(path=str(out / f"{name}.png"), full_page=True)  # noqa: E731

    expect(page.locator("#jobs-table tbody tr")).to_have_count(6)
    shot("jobs")

    page.goto("/jobs/new/?workload=resnet50")
    shot("submit")
    page.get_by_label("Batch size").fill("0")
    page.get_by_label("Image size").fill("2048")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#id_param_image_size_error")).to_be_visible()
    shot("submit-errors")

    page.goto(f"/jobs/{jobs[0][0].pk}/")
    page.get_by_label("Time range").select_option("300")
    expect(page.locator("#live-state")).to_have_text("Live")
    page.wait_for_function("() => echarts.getInstanceByDom(document.getElementById('job-chart'))"
                           ".getOption().series[0].data.length > 500")
    shot("job-detail")

    page.goto(f"/jobs/{Job.objects.get(name='resnet18-ablation').pk}/")      # queued: no samples yet
    expect(page.locator("#live-state")).to_have_text("Live")
    page.wait_for_function("() => echarts.getInstanceByDom(document.getElementById('job-chart'))"
                           ".getOption().graphic[0].elements[0].invisible === false")
    page.screenshot(path=str(tmp_path / "job-queued.png"), full_page=True)

    page.goto(f"/devices/{dev.pk}/")
    page.get_by_role("button", name="5 min", exact=True).click()
    expect(page.locator("#live-state")).to_have_text("Live")
    expect(page.locator('#device-summary dd[data-k="jobs"]')).to_have_text("2")  # acme's two; rival's hidden

    page.goto("/cluster/")
    shot("cluster")
    page.goto("/tenants/acme/")
    page.get_by_label("Token name").fill("laptop CLI")
    page.get_by_role("button", name="Create token").click()
    assert page.locator("#new-token").input_value().startswith("zico_")
    shot("tenant")
    page.goto("/tenants/acme/")
    assert page.locator("#new-token").count() == 0            # shown once only

    page.get_by_role("button", name="Sign out").click()
    sign_in(personas.staff)                                    # cluster staff see every job's band
    page.goto(f"/devices/{dev.pk}/")
    page.get_by_role("button", name="5 min", exact=True).click()
    expect(page.locator('#device-summary dd[data-k="jobs"]')).to_have_text("3")
    page.wait_for_timeout(300)
    shot("device-timeline")
    for name in ("jobs", "submit", "submit-errors", "job-detail", "device-timeline", "cluster", "tenant"):
        assert (out / f"{name}.png").stat().st_size > 10_000, name


MIB = 1 << 20


def _handover_at(t: float, shift: float) -> int:
    """A small job's memory: 40 MiB persistent, up to 180 MiB through its forward pass, freed at its end."""
    f = ((t - shift) % PERIOD_S) / PERIOD_S
    return int((40 + 140 * (f / 0.5)) * MIB) if f < 0.5 else int(40 * MIB)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_run_and_a_memory_handover_are_captured(page, sign_in, personas, tmp_path, settings, rdb):
    """Screenshots of a job page during and after its run, and of a device timeline where a co-located pair
    hands memory over (each job's forward pass while the other's activations are freed). Telemetry and
    lifecycle messages go through the worker's Link, Redis and the control consumer."""
    from workers.link import Link
    from zico.telemetry.consumer import ControlConsumer

    p = personas
    rdb.delete(keys.CONTROL_STREAM)  # rdb empties the telemetry stream: nothing of an earlier run shows
    node = Node.objects.create(host="node-b")
    dev = Device.objects.create(node=node, index=0, kind="gpu", name="NVIDIA H200", uuid="GPU-shot-b0",
                                total_bytes=342 * MIB, budget_bytes=342 * MIB)
    key = keys.device_key("gpu", "node-b", 0)
    now = time.time()
    Device.objects.filter(pk=dev.pk).update(created_at=_dt(now - 3600))
    link, consumer = Link(settings.REDIS_URL, key), ControlConsumer(settings.REDIS_URL, name="shots", block_ms=20)

    def drain():
        link.flush()
        for _ in range(4):
            consumer.step()

    points = [[i / 40, _handover_at(i / 40 * PERIOD_S, 0)] for i in range(41)]
    curve = {"version": 1, "source": "allocator-trace", "device": "cuda:0", "iteration_s": PERIOD_S,
             "persistent_bytes": 40 * MIB, "peak_bytes": max(b for _, b in points), "points": points}
    pair = []
    for name, shift in (("cnn-a", 0.0), ("cnn-b", PERIOD_S / 2)):
        j = submit_job(tenant=p.tenant, owner=p.owner, workload="digits-cnn", params={"iterations": 60}, name=name)
        Job.objects.filter(pk=j.pk).update(created_at=_dt(now - 100))
        j.refresh_from_db()
        transition(j, "profiling")
        link.emit("profile_done", job=j.pk, curve=curve)
        pair.append((j, shift))
    drain()
    placement = Placement.objects.create(device=dev, plan={
        "job_ids": [j.pk for j, _ in pair], "mode": "shift",
        "predicted_slowdown": [1.0, 1.0], "budget_bytes": 342 * MIB, "predicted_peak_bytes": 220 * MIB,
        "sum_of_peaks_bytes": 360 * MIB})
    placement.jobs.set([j for j, _ in pair])
    for j, _ in pair:
        j.refresh_from_db()
        transition(j, "placed", device=dev)
        link.emit("job_started", job=j.pk, placement=placement.pk, resumed_from=0, iterations=60)
    drain()
    Event.objects.filter(job__in=[j for j, _ in pair]).update(time=_dt(now - 95))
    # 90 s of reporter ticks at 5 Hz: both jobs and the device row share each tick's t
    for k in range(450):
        t = now - 90 + k * 0.2
        per_job = {j.pk: _handover_at(t, shift) for j, shift in pair}
        link.publish_samples([*({"job": jid, "device": key, "t": t, "allocated": a, "reserved": 0 if jid == pair[1][0].pk else 160 * MIB,
                                 "iteration": int((t - now + 90) / PERIOD_S), "phase": "forward"} for jid, a in per_job.items()),
                              {"job": None, "device": key, "t": t, "allocated": sum(per_job.values()),
                               "reserved": 268 * MIB, "device_used": 300 * MIB, "budget": 342 * MIB}])
    for j, _ in pair:  # a digits-cnn run's figures, one report per iteration (workers.runner.progress_values)
        for i in range(1, 23):
            link.emit("job_progress", job=j.pk, placement=placement.pk, iteration=i, iterations=60,
                      iterations_per_s=0.25, t=now - 90 + i * PERIOD_S,
                      values={"loss": 2.3 * 0.9 ** i + 0.05, "train_accuracy": 1 - 0.9 * 0.88 ** i})
    drain()
    consumer._store(consumer.downsampler.flush(time.time() + 10))
    out = out_dir(tmp_path)
    sign_in(p.owner)
    first = pair[0][0]
    page.goto(f"/jobs/{first.pk}/")
    expect(page.locator("#live-state")).to_have_text("Live")
    expect(page.locator("#stat-throughput")).to_contain_text("0.25")
    expect(page.locator("#curve-chart")).to_be_visible()
    page.wait_for_function("() => echarts.getInstanceByDom(document.getElementById('job-chart'))"
                           ".getOption().series[0].data.length > 400")
    for name in ("loss", "train_accuracy"):  # one chart per figure, each with its 22 values
        expect(page.locator(f'#metric-charts figure[data-metric="{name}"] figcaption')).to_contain_text("at iteration 22")
    page.wait_for_timeout(300)
    page.screenshot(path=str(out / "job-running.png"), full_page=True)

    link.emit("job_finished", job=first.pk, placement=placement.pk, status="succeeded", reason="",
              metrics={"iterations_done": 60, "iterations_per_s": 0.24, "peak_allocated_bytes": 180 * MIB,
                       "peak_reserved_bytes": 160 * MIB, "mean_iteration_s": 4.2, "solo_iteration_s": PERIOD_S,
                       "slowdown": 1.05, "predicted_slowdown": 1.0})
    drain()
    expect(page.locator("#job-status")).to_have_text("succeeded", timeout=5000)
    expect(page.locator("#panel-plan .tag")).to_have_text("ended")  # for this job, though its partner still runs
    expect(page.locator('#job-summary dd[data-k="current_allocated_bytes"]')).to_have_text("—")  # not "now"
    page.wait_for_timeout(300)
    page.screenshot(path=str(out / "job-finished.png"), full_page=True)

    page.goto(f"/devices/{dev.pk}/")
    page.get_by_role("button", name="5 min", exact=True).click()
    expect(page.locator("#live-state")).to_have_text("Live")
    expect(page.locator("#device-legend button")).to_have_count(6)  # Budget, Pool, Delays, OOM prevented, the pair
    page.evaluate("""() => echarts.getInstanceByDom(document.getElementById('device-chart'))
        .dispatchAction({type: 'dataZoom', startValue: (Date.now() / 1000 - 25) * 1000 })""")  # the last ~20 s
    page.wait_for_timeout(300)
    page.screenshot(path=str(out / "device-handover.png"), full_page=True)
    drawn = page.evaluate("""() => {
        const o = echarts.getInstanceByDom(document.getElementById('device-chart')).getOption();
        const bands = o.series.filter(s => s.id.startsWith('job-'));
        let worst = 0;
        for (let i = 0; i < bands[0].data.length; i++) worst = Math.max(worst, bands.reduce((m, s) => m + s.data[i][1], 0));
        return worst;
    }""")
    assert drawn <= 268 + 1e-6   # MiB: the stacked pair never reaches above what the pool held
    for name in ("job-running", "job-finished", "device-handover"):
        assert (out / f"{name}.png").stat().st_size > 10_000, name
