"""A script job without a curve is profiled as its run starts (Note [A script's profile is the start of its run]
in workers/runner.py): the round places it in a placement of its own (queued -> profiling) and sends one
``run_job`` carrying its profile, on a device where nothing of unknown memory runs (Note [Where a script is
profiled]); while it is profiled the device takes no other job; its curve moves it to running, and the next
round sees the device hold a job of known memory and places the next one beside it. A lost worker returns it to
the queue. Beside jobs of known memory a job without a budget runs under the default bound (in its run spec); one
stopped at it goes back to the queue and is profiled alone. Real PostgreSQL and the real Redis broker."""
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
                                                                           make_script_job, settings):
    settings.ZICO_JOB_DEFAULT_BUDGET_FRACTION = 0.0  # the default bound off: a job without a budget is profiled alone
    for d in cluster[1:]:
        d.set_status("draining")
    running = make_job(tenant, curve=triangular_curve(GiB, 10 * GiB, 0.2))
    lifecycle.place(cluster[0], [running], {})
    unknown = make_script_job(tenant)  # no budget, no default bound: profiled alone only
    Scheduler().run_round()
    unknown.refresh_from_db()
    assert unknown.status == "queued" and "profiled alone there (ZICO_JOB_DEFAULT_BUDGET_FRACTION is 0)" in \
        unknown.waiting_reason, unknown.waiting_reason
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


# -- Note [Where a script is profiled]: a job without a budget, beside jobs of known memory, under the default bound


def _run_spec(queued_messages, placement):
    [(task, args)] = [m for m in queued_messages(placement.device.queue) if m[1][1]["placement"] == placement.pk]
    assert task == RUN_TASK
    return args[1]


def _one_device_running(cluster, tenant, make_job, peak_bytes):
    """Device 0 runs one job of known memory (``peak_bytes``); the other device is draining."""
    for d in cluster[1:]:
        d.set_status("draining")
    running = make_job(tenant, curve=triangular_curve(GiB, peak_bytes, 0.2))
    lifecycle.place(cluster[0], [running], {})
    return running


def test_a_script_without_a_budget_is_profiled_beside_known_jobs_under_the_default_bound(
        cluster, tenant, make_job, make_script_job, queued_messages, settings):
    assert settings.ZICO_JOB_DEFAULT_BUDGET_FRACTION == 0.5  # the documented default
    _one_device_running(cluster, tenant, make_job, 4 * GiB)
    script = make_script_job(tenant)
    res = Scheduler().run_round()
    script.refresh_from_db()
    assert res.profiling == [script.pk] and script.status == "profiling"
    placement = script.active_placement()
    assert placement.device_id == cluster[0].pk and placement.plan["default_budget_bytes"] == 8 * GiB  # half of 16
    spec = _run_spec(queued_messages, placement)
    assert spec["job_budget_bytes"] == 8 * GiB and spec["job_budget_default"] is True and spec["profile"]
    assert script.budget_bytes is None  # the job's own field stays unset: the bound is the platform's


def test_the_default_bound_is_what_the_device_budget_leaves_beside_the_peaks(
        cluster, tenant, make_job, make_script_job, queued_messages):
    _one_device_running(cluster, tenant, make_job, 10 * GiB)
    script = make_script_job(tenant)
    Scheduler().run_round()
    placement = Job.objects.get(pk=script.pk).active_placement()
    assert placement is not None and _run_spec(queued_messages, placement)["job_budget_bytes"] == 6 * GiB  # 16 - 10


def test_a_script_without_a_budget_waits_where_too_little_is_left_beside_the_peaks(
        cluster, tenant, make_job, make_script_job):
    _one_device_running(cluster, tenant, make_job, 16 * GiB - 32 * (1 << 20))  # 32 MiB left, under the 64 MiB floor
    script = make_script_job(tenant)
    Scheduler().run_round()
    script.refresh_from_db()
    assert script.status == "queued", script.status
    assert ("running 1 job(s) with 15.97 GiB of peaks, 32.00 MiB of its budget left: under the 64.00 MiB a job "
            "without a budget needs to be profiled beside other jobs") in script.waiting_reason, script.waiting_reason
    assert "no device is free to profile it on" in script.waiting_reason


def _finish(device, job, placement, status, reason, metrics):
    handlers.on_job_finished(_msg("job_finished", device, job=job.pk, placement=placement.pk, status=status,
                                  reason=reason, metrics=metrics), _Redis())


OOM_AT_BOUND = ("OutOfMemoryError: the allocator refused 2.00 MiB for job 9 on the CPU: the device agent refused more "
                "memory: agent refused: job budget: this job would hold 6.00 GiB, past its budget of 6.00 GiB")


def test_a_run_stopped_at_its_default_bound_is_requeued_and_then_profiled_alone(
        cluster, tenant, make_job, make_script_job, queued_messages):
    running = _one_device_running(cluster, tenant, make_job, 10 * GiB)
    script = make_script_job(tenant)
    Scheduler().run_round()
    script.refresh_from_db()
    placement = script.active_placement()
    device = placement.device
    handlers.on_job_started(_msg("job_started", device, job=script.pk, placement=placement.pk, resumed_from=0,
                                 iterations=0), _Redis())
    _finish(device, script, placement, "failed", OOM_AT_BOUND, {"job_budget_refusals": 1, "peak_reserved_bytes": 6 * GiB})
    script.refresh_from_db()
    placement.refresh_from_db()
    assert script.status == "queued" and not script.failure_reason and placement.ended_at is not None
    move = script.events.filter(kind="status_change").latest("time")
    assert move.details["reason"] == ("needed more than the 6.00 GiB default bound beside the device's jobs while "
                                      "profiled: it will be profiled alone; submit with --budget to say what it "
                                      "needs"), move.details
    assert move.details["from"] == "profiling" and move.details["bound_bytes"] == 6 * GiB
    assert script.metrics["default_bound_exceeded"] == {"bound_bytes": 6 * GiB, "device": str(device), "refusals": 1,
                                                        "peak_reserved_bytes": 6 * GiB}
    assert "job_budget_refusals" not in script.metrics  # the stopped run's figures are not the job's

    # while the device runs its job, the script waits, saying it is profiled alone
    Scheduler().run_round()
    script.refresh_from_db()
    assert script.status == "queued" and ("this job is profiled alone (it needed more than its default bound "
                                          "beside other jobs)") in script.waiting_reason, script.waiting_reason
    # the device empty, it is profiled alone there: no bound but the device's budget
    lifecycle.finish(Job.objects.get(pk=running.pk), "succeeded", device)
    handlers.end_placement_if_done(running.active_placement(), "test: done")
    Scheduler().run_round()
    script.refresh_from_db()
    alone = script.active_placement()
    assert script.status == "profiling" and alone.pk != placement.pk and "default_budget_bytes" not in alone.plan
    spec = _run_spec(queued_messages, alone)
    assert "job_budget_bytes" not in spec and "job_budget_default" not in spec
    # alone, an out-of-memory is an ordinary failure: requeued once, never twice
    _finish(device, script, alone, "failed", "OutOfMemoryError: the device budget of 16.00 GiB was reached", {})
    script.refresh_from_db()
    assert script.status == "failed" and "16.00 GiB" in script.failure_reason


def test_a_run_under_the_default_bound_that_failed_otherwise_fails(cluster, tenant, make_job, make_script_job):
    _one_device_running(cluster, tenant, make_job, 10 * GiB)
    script = make_script_job(tenant)
    Scheduler().run_round()
    placement = Job.objects.get(pk=script.pk).active_placement()
    _finish(placement.device, script, placement, "failed", "ValueError: bad shape", {"peak_reserved_bytes": GiB})
    script.refresh_from_db()
    assert script.status == "failed" and script.failure_reason.startswith("ValueError: bad shape")


def test_a_run_stopped_at_its_own_budget_fails_the_user_chose_it(cluster, tenant, make_job, make_script_job):
    _one_device_running(cluster, tenant, make_job, 10 * GiB)
    script = make_script_job(tenant, budget_bytes=4 * GiB)
    Scheduler().run_round()
    placement = Job.objects.get(pk=script.pk).active_placement()
    assert "default_budget_bytes" not in placement.plan
    _finish(placement.device, script, placement, "failed", "agent refused: job budget: past its budget of 4.00 GiB",
            {"job_budget_refusals": 2})
    script.refresh_from_db()
    assert script.status == "failed" and "past its budget of 4.00 GiB" in script.failure_reason
