"""A script job without a curve is profiled as its run starts (Note [A script's profile is the start of its run]
in workers/runner.py): the round places it in a placement of its own (queued -> profiling) and sends one
``run_job`` carrying its profile, on a device where nothing of unknown memory runs (Note [Where a script is
profiled]); while it is profiled the device takes no other job; its curve moves it to running, and the next
round sees the device hold a job of known memory and places the next one beside it. A lost worker returns it to
the queue. Real PostgreSQL and the real Redis broker."""
import hashlib
import uuid

import pytest

from placement.curves import triangular_curve
from zico.cluster.models import Placement
from zico.jobs.code_models import CodeArchive
from zico.jobs.models import Job, MemoryProfile
from zico.scheduling.service import RUN_TASK, Scheduler
from zico.telemetry import handlers
from zico.jobs import lifecycle

GiB = 1 << 30


@pytest.fixture
def make_script_job(db):
    """make_script_job(tenant, command=..., budget_bytes=None): a queued job with code (its own archive row)."""

    def make(tenant, command=("python", "train.py"), budget_bytes=None):
        sha = hashlib.sha256(uuid.uuid4().bytes).hexdigest()
        archive = CodeArchive.objects.create(tenant=tenant, sha256=sha, format="tar.gz", size_bytes=100, files=1,
                                             unpacked_bytes=100)
        return Job.objects.create(tenant=tenant, workload="", code=archive, command=list(command), env={},
                                  params={"code_sha256": sha, "command": list(command), "env": {}},
                                  budget_bytes=budget_bytes)

    return make


class _Redis:
    """The few Redis calls the handlers make in these tests (cancel keys and log streams are not under test)."""

    def set(self, *a, **k):
        pass

    def xrange(self, *a, **k):
        return []

    def delete(self, *a, **k):
        pass


def _msg(kind, device, **fields):
    return {"msg": kind, "t": 1.7e9, "device": f"gpu.{device.node.host}.{device.index}", **fields}


def test_a_script_job_is_placed_to_be_profiled_as_it_runs_and_its_curve_opens_the_device(
        cluster, tenant, make_job, make_script_job, queued_messages):
    script = make_script_job(tenant)
    res = Scheduler().run_round()
    script.refresh_from_db()
    assert res.profiling == [script.pk] and script.status == "profiling"
    placement = script.active_placement()
    assert placement is not None and placement.plan["mode"] == "profile"
    assert script.profiling_device_id == placement.device_id  # where the lost-worker check looks
    [(task, spec)] = [m for m in queued_messages(placement.device.queue)]
    assert task == RUN_TASK and spec[1]["curve"] is None and spec[1]["placement"] == placement.pk
    assert spec[1]["profile"]["time_limit_s"] > 0 and spec[1]["command"] == ["python", "train.py"]

    # a second script and a job with a curve: neither goes to the device that profiles the first
    other = make_script_job(tenant)
    ready = make_job(tenant, curve=triangular_curve(GiB, 3 * GiB, 0.2))
    res = Scheduler().run_round()
    other.refresh_from_db()
    assert other.status == "profiling" and other.active_placement().device_id != placement.device_id
    assert res.placed == {}  # both devices now run a job of unknown memory: nothing is placed beside them
    assert "memory use is unknown" in Job.objects.get(pk=ready.pk).waiting_reason

    # the worker's profile: stored, the job runs on; the device is then open to the ready job
    device = placement.device
    handlers.on_job_started(_msg("job_started", device, job=script.pk, placement=placement.pk, resumed_from=0,
                                 iterations=0), _Redis())
    script.refresh_from_db()
    assert script.status == "profiling" and script.started_at is not None
    curve = triangular_curve(GiB, 4 * GiB, 0.1).to_dict()
    handlers.on_profile_done(_msg("profile_done", device, job=script.pk, placement=placement.pk, curve=curve,
                                  iterations=4), _Redis())
    script.refresh_from_db()
    assert script.status == "running" and MemoryProfile.objects.filter(job=script).count() == 1
    res = Scheduler().run_round()
    assert res.placed.get(ready.pk) is not None
    assert Placement.objects.get(pk=res.placed[ready.pk]).device_id == device.pk  # beside the profiled script

    # a rerun of the same code and command reuses the stored curve: ready, never profiled again
    rerun = Job.objects.create(tenant=tenant, workload="", code=script.code, command=script.command, env={},
                               params=script.params)
    Scheduler().run_round()
    rerun.refresh_from_db()
    assert rerun.status in ("ready", "placed") and rerun.profiles.get().peak_bytes == 4 * GiB


def test_a_job_with_its_own_budget_is_profiled_beside_jobs_it_fits_beside(cluster, tenant, make_job,
                                                                           make_script_job):
    for d in cluster[1:]:
        d.set_status("draining")
    running = make_job(tenant, curve=triangular_curve(GiB, 10 * GiB, 0.2))
    lifecycle.place(cluster[0], [running], {})
    unknown = make_script_job(tenant)  # no budget: profiled alone only
    Scheduler().run_round()
    unknown.refresh_from_db()
    assert unknown.status == "queued" and "profiled alone there" in unknown.waiting_reason
    fits = make_script_job(tenant, command=("python", "small.py"), budget_bytes=4 * GiB)  # 16 - 10 >= 4
    too_big = make_script_job(tenant, command=("python", "big.py"), budget_bytes=8 * GiB)
    Scheduler().run_round()
    assert Job.objects.get(pk=fits.pk).status == "profiling"
    assert Job.objects.get(pk=too_big.pk).status == "queued"


def test_a_worker_lost_while_it_profiles_a_script_requeues_it_to_be_profiled_again(cluster, tenant,
                                                                                  make_script_job):
    script = make_script_job(tenant)
    Scheduler().run_round()
    script.refresh_from_db()
    placement = script.active_placement()
    lifecycle.lose(placement.device, [script], reason="test: worker gone")
    script.refresh_from_db()
    placement.refresh_from_db()
    assert script.status == "queued" and placement.ended_at is not None
    assert any("profiled again" in e.details.get("reason", "") for e in script.events.filter(kind="status_change"))
    Scheduler().run_round()
    script.refresh_from_db()
    assert script.status == "profiling" and script.active_placement().pk != placement.pk


def test_a_profile_the_worker_could_not_build_fails_the_job_and_stops_its_run(cluster, tenant, make_script_job,
                                                                             broker):
    from zico_contracts import keys

    script = make_script_job(tenant)
    Scheduler().run_round()
    placement = Job.objects.get(pk=script.pk).active_placement()
    handlers.on_profile_done(_msg("profile_done", placement.device, job=script.pk, placement=placement.pk,
                                  error="the script's profile trace is unusable: CurveError: no iteration"), broker)
    script.refresh_from_db()
    assert script.status == "failed" and "profile trace is unusable" in script.failure_reason
    assert broker.exists(keys.cancel_key(script.pk))  # the run, still going, is stopped
    # a profile from a run that is no longer the job's is ignored
    other = make_script_job(tenant)
    Scheduler().run_round()
    handlers.on_profile_done(_msg("profile_done", placement.device, job=other.pk, placement=placement.pk,
                                  curve=triangular_curve(GiB, 2 * GiB, 0.1).to_dict()), broker)
    assert Job.objects.get(pk=other.pk).status == "profiling" and not MemoryProfile.objects.filter(job=other).exists()
    broker.delete(keys.cancel_key(script.pk))
