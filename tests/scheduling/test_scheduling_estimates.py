"""A job whose stored CPU estimate fits no device is refused at submission, failed by the scheduler before it is
profiled, or failed (and its profiling run asked to stop) once the scheduler's background estimate lands
(zico.jobs.known, zico.scheduling.estimates). Estimates are made by the real ``manage.py curve estimate`` in a child
process, into a cache folder of the test's own; real PostgreSQL and Redis."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from rest_framework.test import APIClient

from zico.cluster.models import Device
from zico.jobs import known
from zico.jobs.models import Job
from zico.scheduling.estimates import BackgroundEstimates
from zico.scheduling.service import Scheduler
from zico_contracts import keys
from zico.tenants.models import Role

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20
# 117 MiB estimated for cuda:0 (of which 64 MiB cuBLAS workspaces): too big for a 100 MiB GPU, not for a
# 64 MiB CPU pool
PARAMS = {"batch_size": 256, "image_size": 32}


def _estimate(cache_dir: Path, params: dict) -> None:
    env = {**os.environ, "ZICO_ESTIMATE_CACHE_DIR": str(cache_dir), "DJANGO_SETTINGS_MODULE": "zico.test_settings"}
    out = subprocess.run([sys.executable, "manage.py", "curve", "estimate", "digits-cnn", "--params-json",
                          json.dumps(params), "--device", known.ESTIMATE_DEVICE], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr


@pytest.fixture(scope="module")
def estimated(tmp_path_factory):
    """A cache folder holding the real estimate of digits-cnn with PARAMS."""
    cache = tmp_path_factory.mktemp("estimates")
    _estimate(cache, PARAMS)
    return cache


@pytest.fixture
def cache(estimated, settings):
    settings.ZICO_ESTIMATE_CACHE_DIR = estimated
    return estimated


@pytest.fixture
def full():
    from zico_workloads.catalog import validate_params

    return lambda params: validate_params("digits-cnn", params)


@pytest.fixture
def small_gpus(cluster):
    """The cluster's two GPUs shrunk to 100 MiB each."""
    Device.objects.filter(pk__in=[d.pk for d in cluster]).update(total_bytes=100 * MIB, budget_bytes=100 * MIB)
    return cluster


@pytest.fixture
def submit(tenant):
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(f"member-{tenant.slug}")
    tenant.add_member(user, Role.MEMBER)
    client = APIClient()
    client.force_login(user)
    return lambda **body: client.post("/api/jobs/", {"tenant": tenant.slug, "workload": "digits-cnn",
                                                     "params": PARAMS, **body}, format="json")


def test_a_stored_estimate_that_fits_no_device_is_refused_at_submit(cache, small_gpus, submit, full):
    curve = known.stored_estimate("digits-cnn", full(PARAMS))
    assert curve is not None and curve.source == "estimate"
    need = known.estimated_need(curve, "gpu")
    assert need == int(curve.peak_bytes * 0.95) > 100 * MIB
    r = submit()
    assert r.status_code == 400, r.content
    assert r.data["params"] == [f"needs ≥ {need} bytes (its CPU estimate of {int(curve.peak_bytes)} bytes for "
                                f"cuda:0, less the estimate's 5% tolerance); the largest device budget is "
                                f"{100 * MIB} bytes (shrink the batch or the model)"]
    assert not Job.objects.exists()
    assert submit(params={**PARAMS, "batch_size": 8}).status_code == 201  # no estimate stored for these: accepted


def test_a_cpu_pool_is_judged_without_the_cuda_workspaces(cache, small_gpus, submit, full):
    curve = known.stored_estimate("digits-cnn", full(PARAMS))
    assert known.estimated_need(curve, "cpu") < 64 * MIB < known.estimated_need(curve, "gpu")
    Device.objects.create(node=small_gpus[0].node, index=0, kind="cpu", name="CPU pool", total_bytes=64 * MIB,
                          budget_bytes=64 * MIB)
    assert submit().status_code == 201


def test_an_estimate_over_the_jobs_own_budget_is_refused_on_that_field(cache, cluster, submit):
    r = submit(budget_bytes=64 * MIB)
    assert r.status_code == 400 and r.data["budget_bytes"][0].startswith("needs ≥ ")
    assert r.data["budget_bytes"][0].endswith(f"its budget_bytes is {64 * MIB}")
    assert submit(budget_bytes=512 * MIB).status_code == 201


def test_the_scheduler_fails_a_misfit_with_a_stored_estimate_before_profiling(cache, small_gpus, tenant, full,
                                                                             queued_messages):
    job = Job.objects.create(tenant=tenant, workload="digits-cnn", params=full(PARAMS))  # queued before
    res = Scheduler().run_round()
    assert res.failed == [job.pk] and not res.profiling
    job.refresh_from_db()
    assert job.status == "failed" and job.failure_reason.startswith("refused before profiling: needs ≥ ")
    assert all(queued_messages(d.queue) == [] for d in small_gpus)


def test_a_background_estimate_fails_the_profiling_misfit_and_stops_its_profile(small_gpus, tenant, full, settings,
                                                                               tmp_path):
    settings.ZICO_ESTIMATE_CACHE_DIR = tmp_path  # nothing stored: the scheduler estimates in the background
    params = full({**PARAMS, "seed": 7})
    job = Job.objects.create(tenant=tenant, workload="digits-cnn", params=params)
    estimates = BackgroundEstimates(time_limit_s=600)
    scheduler = Scheduler(estimates=estimates)
    r = redis.Redis.from_url(settings.REDIS_URL)
    r.delete(keys.cancel_key(job.pk))
    try:
        assert scheduler.run_round().profiling == [job.pk]  # profiled at once, estimated beside it
        assert estimates.running is not None
        deadline = time.monotonic() + 600
        while estimates.running is not None and time.monotonic() < deadline:
            estimates.running[2].wait(timeout=deadline - time.monotonic())  # the child's exit, then a round
            res = scheduler.run_round()
    finally:
        estimates.close()
    assert res.failed == [job.pk]
    job.refresh_from_db()
    assert job.status == "failed" and job.failure_reason.startswith("refused by its estimate: needs ≥ ")
    assert r.get(keys.cancel_key(job.pk)) == b"1"  # its worker stops the profile at the next iteration
    assert known.stored_estimate("digits-cnn", params) is not None  # and the next identical submission is refused


def _sleeper(workload, params_json):
    return [sys.executable, "-c", "import time; time.sleep(120)"]


def test_a_background_estimate_past_its_time_limit_is_killed_and_not_retried(settings, tmp_path):
    settings.ZICO_ESTIMATE_CACHE_DIR = tmp_path
    estimates = BackgroundEstimates(time_limit_s=0.0, argv=_sleeper)  # any age is past the limit
    estimates.want("digits-cnn", {"a": 1}, 1)
    assert estimates.step(lambda ids: True) == []
    proc = estimates.running[2]
    try:
        assert estimates.step(lambda ids: True) == [] and estimates.running is None
        assert proc.poll() is not None
        estimates.want("digits-cnn", {"a": 1}, 2)
        assert estimates.running is None and not estimates.pending  # tried once in this process
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_background_estimate_nobody_waits_for_is_stopped_and_the_next_one_starts(settings, tmp_path):
    settings.ZICO_ESTIMATE_CACHE_DIR = tmp_path
    estimates = BackgroundEstimates(time_limit_s=600, argv=_sleeper)
    estimates.want("digits-cnn", {"a": 1}, 1)
    estimates.want("digits-cnn", {"a": 2}, 2)
    estimates.step(lambda ids: True)
    first = estimates.running[2]
    try:
        estimates.step(lambda ids: 2 in ids)  # job 1 got its curve meanwhile; job 2 still waits
        assert first.poll() is not None
        assert estimates.running is not None and estimates.running[1].job_ids == {2}
    finally:
        estimates.close()
        if first.poll() is None:
            first.kill()
    assert estimates.running is None
