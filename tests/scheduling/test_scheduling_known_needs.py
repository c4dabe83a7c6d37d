"""What is known about an identical job serves the next one (zico.jobs.known, real PostgreSQL and Redis): its
measured profile is reused instead of profiling again; its profiling failure, reported by a worker's real
``profile_done`` message through the control consumer, is remembered with its reason, so an identical job is refused
at submission and failed by the scheduler without a second profile; and the failures that say nothing about an
identical run (a cancel, a machine's error, an out-of-memory beside other jobs, one a bigger device now avoids, a
time limit since raised) are not held against it."""
import pytest
from rest_framework.test import APIClient

from placement.curves import triangular_curve
from workers.link import Link
from zico.cluster.models import Device, Placement
from zico.jobs.models import Event, Job, MemoryProfile
from zico.scheduling.service import Scheduler
from zico_contracts import keys
from zico.telemetry.consumer import ControlConsumer
from zico.tenants.models import Role

from .test_scheduling_waiting import api  # noqa: F401 (fixture)

from .conftest import GiB
from zico.jobs.lifecycle import transition
from zico.jobs import lifecycle

pytestmark = pytest.mark.django_db(transaction=True)

PARAMS = {"iterations": 50, "batch_size": 48}  # the same for every job of a test: identical jobs


def _job(tenant, status="queued", params=PARAMS):
    job = Job.objects.create(tenant=tenant, workload="digits-cnn", params=params)
    if status != "queued":
        transition(job, status)
    return job


def _profile_tasks(queued_messages, cluster):
    return [args[0] for d in cluster for task, args in queued_messages(d.queue) if task == "zico.device.profile_job"]


@pytest.fixture
def fail_profile(cluster, settings):
    """fail_profile(job, error, device=cluster[0]): the job is profiling on ``device`` and its worker reports
    ``error`` (a ``profile_done`` through the real Link and control consumer)."""
    consumer = ControlConsumer(settings.REDIS_URL, name="known-needs", block_ms=20)

    def fail(job, error, device=None):
        device = device or cluster[0]
        transition(job, "profiling", device=device)
        link = Link(settings.REDIS_URL, keys.device_key(device.kind, device.node.host, device.index))
        link.emit("profile_done", job=job.pk, error=error)
        link.flush()
        for _ in range(4):
            consumer.step()
        job.refresh_from_db()
        assert job.status == "failed"
        return job
    return fail


@pytest.fixture
def submit(tenant):
    """submit(params) -> the POST /api/jobs/ response of a member of ``tenant``."""
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(f"member-{tenant.slug}")
    tenant.add_member(user, Role.MEMBER)
    client = APIClient()
    client.force_login(user)
    return lambda params=PARAMS: client.post("/api/jobs/", {"tenant": tenant.slug, "workload": "digits-cnn",
                                                            "params": params}, format="json")


def _full(params):
    from zico_workloads.catalog import validate_params

    return validate_params("digits-cnn", params)


def test_an_identical_jobs_profile_is_reused_and_the_job_is_not_profiled(cluster, tenant, queued_messages):
    earlier = _job(tenant)
    MemoryProfile.record(earlier, triangular_curve(GiB, 3 * GiB, 0.2))
    transition(earlier, "ready")
    again, other = _job(tenant), _job(tenant, params={**PARAMS, "batch_size": 16})
    res = Scheduler().run_round()
    assert again.pk in res.ready and again.pk not in res.profiling and other.pk in res.profiling
    copy = again.latest_profile()
    assert copy.curve == earlier.latest_profile().curve and copy.peak_bytes == 3 * GiB
    event = again.events.get(kind=Event.Kind.STATUS_CHANGE, details__to="ready")
    assert event.details["profile_of_job"] == earlier.pk and "identical job reused" in event.details["reason"]
    assert _profile_tasks(queued_messages, cluster) == [other.pk]


def test_a_remembered_out_of_memory_refuses_the_next_identical_job_at_submit_and_in_the_scheduler(
        cluster, tenant, fail_profile, submit, queued_messages):
    params = _full(PARAMS)
    queued_before = _job(tenant, params=params)  # submitted before the first one failed
    first = fail_profile(_job(tenant, params=params), "OutOfMemoryError: Zico CPU pool: out of memory")
    failure = first.metrics["profile_failure"]
    assert failure == {"kind": "out_of_memory", "reason": "OutOfMemoryError: Zico CPU pool: out of memory",
                       "device": str(cluster[0]), "budget_bytes": 16 * GiB, "own_budget": False}
    r = submit()
    assert r.status_code == 400, r.content
    # only what the run had (Note [An out-of-memory says what the run had]) and what an identical job needs
    assert r.data["params"][0] == (f"profiling identical job {first.pk} ran out of memory under the device budget of "
                                   f"{16 * GiB} bytes, alone on {cluster[0]}: it needs a device with a budget above "
                                   f"{16 * GiB} bytes; an identical job would fail the same way (change the params)")
    res = Scheduler().run_round()
    assert res.failed == [queued_before.pk] and not res.profiling
    queued_before.refresh_from_db()
    assert queued_before.failure_reason.startswith(f"profiling identical job {first.pk} ran out of memory")
    assert queued_before.failure_reason.endswith("not profiled again")
    assert _profile_tasks(queued_messages, cluster) == []
    assert submit(params={**PARAMS, "batch_size": 8}).status_code == 201  # other params: not identical


def test_an_out_of_memory_no_longer_applies_once_a_bigger_device_is_registered(cluster, tenant, fail_profile, submit):
    fail_profile(_job(tenant, params=_full(PARAMS)), "OutOfMemoryError: CUDA out of memory")
    assert submit().status_code == 400
    node = cluster[0].node
    Device.objects.create(node=node, index=7, kind="gpu", name="Bigger GPU", uuid=f"GPU-{node.host}-7",
                          total_bytes=80 * GiB, budget_bytes=72 * GiB)
    assert submit().status_code == 201
    assert Job.objects.get(status="queued").pk in Scheduler().run_round().profiling  # profiled on its chance


def test_an_out_of_memory_beside_other_jobs_is_not_remembered(cluster, tenant, fail_profile, submit):
    neighbour = _job(tenant, params={"iterations": 9})
    MemoryProfile.record(neighbour, triangular_curve(GiB, 2 * GiB, 0.2))
    transition(neighbour, "ready")
    lifecycle.place(cluster[0], [neighbour])  # it held part of the device while the profile ran
    failed = fail_profile(_job(tenant, params=_full(PARAMS)), "OutOfMemoryError: CUDA out of memory")
    assert "profile_failure" not in failed.metrics and "out of memory" in failed.failure_reason
    assert submit().status_code == 201


@pytest.mark.parametrize("error", [
    "cancelled on request",
    "OSError: [Errno 28] No space left on device",
    "ZicoError: the allocator cannot run here",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
])
def test_failures_of_the_machine_or_a_cancel_are_not_held_against_an_identical_job(cluster, tenant, fail_profile,
                                                                                   submit, error):
    failed = fail_profile(_job(tenant, params=_full(PARAMS)), error)
    assert "profile_failure" not in failed.metrics
    assert submit().status_code == 201


def test_a_workload_error_is_remembered_with_its_reason(cluster, tenant, fail_profile, submit):
    error = "FloatingPointError: iteration 2: loss is nan"
    first = fail_profile(_job(tenant, params=_full(PARAMS)), error)
    assert first.metrics["profile_failure"] == {"kind": "error", "reason": error}
    r = submit()
    assert r.status_code == 400 and f"profiling identical job {first.pk} failed: {error}" in r.data["params"][0]


def test_a_time_limit_is_remembered_until_the_limit_is_raised(cluster, tenant, fail_profile, submit, settings):
    error = ("stopped after 130 s and 1 of 4 iterations: over the profiling time limit of 120 s "
             "(ZICO_PROFILE_TIME_LIMIT_S)")
    first = fail_profile(_job(tenant, params=_full(PARAMS)), error)
    assert first.metrics["profile_failure"] == {"kind": "time_limit", "reason": error, "limit_s": 120.0}
    assert submit().status_code == 400
    settings.ZICO_PROFILE_TIME_LIMIT_S = 600.0
    assert submit().status_code == 201


def test_a_later_successful_profile_wins_over_an_earlier_failure(cluster, tenant, fail_profile, submit):
    fail_profile(_job(tenant, params=_full(PARAMS)), "FloatingPointError: loss is nan")
    fixed = _job(tenant, params=_full(PARAMS))
    MemoryProfile.record(fixed, triangular_curve(GiB, 2 * GiB, 0.2))  # e.g. a curve stored with manage.py curve
    assert submit().status_code == 201


def test_identical_jobs_queued_together_are_profiled_once_and_the_others_take_its_curve(cluster, tenant, api,
                                                                                       queued_messages):
    scheduler = Scheduler()  # one process: its first round alone resends what an earlier one left profiling
    first, second = _job(tenant), _job(tenant)
    res = scheduler.run_round()
    assert res.profiling == [first.pk] and res.waiting[second.pk].kind == "identical_profiling"
    body = api(second)
    assert (body["status"], body["waiting_kind"]) == ("queued", "identical_profiling")
    assert body["waiting_reason"] == (f"waiting for the profile of identical job {first.pk} (same workload and "
                                      "params): it is not profiled twice")
    third = _job(tenant)  # submitted while the first one profiles
    assert scheduler.run_round().profiling == [] and Job.objects.get(pk=third.pk).status == "queued"
    MemoryProfile.record(first, triangular_curve(GiB, 3 * GiB, 0.2))  # the worker's profile_done, as the consumer
    transition(first, "ready")
    res = scheduler.run_round()
    assert {second.pk, third.pk} <= set(res.ready) and not res.profiling
    assert _profile_tasks(queued_messages, cluster) == [first.pk]  # one profile for the three


def test_a_held_job_is_profiled_after_all_if_the_identical_profile_ends_without_a_curve(cluster, tenant):
    first, second = _job(tenant), _job(tenant)
    Scheduler().run_round()
    transition(first, "cancelled")  # a cancel says nothing about the workload
    assert Scheduler().run_round().profiling == [second.pk]


def test_a_duplicate_profiles_late_result_changes_nothing_once_the_job_moved_on(cluster, tenant, settings):
    """A restarted scheduler resends profile_job (Note [A stale profile run] in workers/profiling.py): the first
    profile's curve made the job ready; the duplicate's late error is ignored (no failure, nothing remembered)
    and its late curve is only stored."""
    consumer = ControlConsumer(settings.REDIS_URL, name="stale-profile", block_ms=20)
    device = cluster[0]
    job = _job(tenant)
    transition(job, "profiling", device=device)
    link = Link(settings.REDIS_URL, keys.device_key(device.kind, device.node.host, device.index))
    curve = triangular_curve(GiB, 2 * GiB, 0.2).to_dict()
    link.emit("profile_done", job=job.pk, curve=curve)
    link.emit("profile_done", job=job.pk, error="RuntimeError: job 1 is already running on cpu")
    link.emit("profile_done", job=job.pk, curve=curve)
    link.flush()
    for _ in range(6):
        consumer.step()
    job.refresh_from_db()
    assert job.status == "ready" and job.failure_reason == ""
    assert "profile_failure" not in (job.metrics or {})
    assert MemoryProfile.objects.filter(job=job).count() == 2


def test_a_script_whose_identical_run_failed_its_profile_is_refused_at_submit_naming_the_code(
        cluster, tenant, settings, submit):
    # a job with code is profiled as its run starts; its failure comes as the run's job_finished (real Link and
    # control consumer) and is remembered, so the same code, command and env is refused at submission (as the
    # scheduler would fail it), while another command in the same project is accepted
    from zico.jobs.code_models import CodeArchive
    from zico.jobs.submission import code_identity

    archive = CodeArchive.objects.create(tenant=tenant, sha256="ab" * 32, format="tar.gz", size_bytes=100, files=1,
                                         unpacked_bytes=100)
    _store_archive(archive, {"train.py": b"print('train')\n"})  # submission reads its requirements (none here)
    command = ["python", "train.py"]
    first = Job.objects.create(tenant=tenant, code=archive, command=command, env={},
                               params=code_identity(archive, command, {}))
    Scheduler().run_round()
    first.refresh_from_db()
    placement = first.active_placement()
    assert first.status == "profiling" and placement is not None
    error = "RuntimeError: shape mismatch in train.py line 12"
    link = Link(settings.REDIS_URL, keys.device_key(placement.device.kind, placement.device.node.host,
                                                    placement.device.index))
    link.emit("job_finished", job=first.pk, placement=placement.pk, status="failed", reason=error, metrics={})
    link.flush()
    consumer = ControlConsumer(settings.REDIS_URL, name="known-needs-code", block_ms=20)
    for _ in range(4):
        consumer.step()
    first.refresh_from_db()
    assert first.status == "failed" and first.metrics["profile_failure"] == {"kind": "error", "reason": error}

    member = first.tenant.memberships.filter(role=Role.MEMBER).first().user
    client = APIClient()
    client.force_login(member)
    body = {"tenant": tenant.slug, "code": archive.pk, "command": command, "env": {}}
    r = client.post("/api/jobs/", body, format="json")
    assert r.status_code == 400, r.content
    assert f"profiling identical job {first.pk} failed: {error}" in r.data["code"][0]
    assert "change the code, command or env" in r.data["code"][0]
    assert Job.objects.filter(code=archive).count() == 1  # nothing stored
    assert client.post("/api/jobs/", {**body, "command": ["python", "train.py", "--fix"]},
                       format="json").status_code == 201


def _member_client(tenant, name):
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(name)
    tenant.add_member(user, Role.MEMBER)
    client = APIClient()
    client.force_login(user)
    return client


def test_a_failure_one_tenant_caused_never_refuses_another_tenants_identical_job(cluster, tenant, fail_profile,
                                                                                  submit):
    """Note [A failure refuses only its own tenant]: the victim's identical catalog job is still accepted and
    profiled; the tenant whose job failed is refused as before."""
    from zico.tenants.models import Tenant

    attacker_job = fail_profile(_job(tenant, params=_full(PARAMS)), "OutOfMemoryError: CUDA out of memory")
    assert attacker_job.metrics["profile_failure"]["kind"] == "out_of_memory"
    assert submit().status_code == 400  # its own tenant: refused, naming the failure
    victim = Tenant.objects.create(name="Victim", slug="victim", max_running_jobs=100)
    queued = _job(victim, params=_full(PARAMS))
    r = _member_client(victim, "victim-member").post(
        "/api/jobs/", {"tenant": "victim", "workload": "digits-cnn", "params": PARAMS}, format="json")
    assert r.status_code == 201, r.content
    res = Scheduler().run_round()
    assert queued.pk not in res.failed and queued.pk in res.profiling


def test_a_failure_beside_a_neighbour_refuses_no_one_and_another_tenants_identical_job_is_accepted(
        cluster, tenant, fail_profile, submit):
    """Tenant A's catalog job runs out of memory while tenant B's job runs on the device: not remembered, so
    neither tenant's identical submission is refused, and B's is profiled."""
    from zico.tenants.models import Tenant

    other = Tenant.objects.create(name="Other", slug="other-neighbour", max_running_jobs=100,
                                  allow_cross_tenant_colocation=True)
    Tenant.objects.filter(pk=tenant.pk).update(allow_cross_tenant_colocation=True)
    neighbour = _job(other, params={"iterations": 9})
    MemoryProfile.record(neighbour, triangular_curve(GiB, 2 * GiB, 0.2))
    transition(neighbour, "ready")
    lifecycle.place(cluster[0], [neighbour])
    failed = fail_profile(_job(tenant, params=_full(PARAMS)), "OutOfMemoryError: CUDA out of memory")
    assert "profile_failure" not in failed.metrics
    assert submit().status_code == 201
    r = _member_client(other, "other-neighbour-member").post(
        "/api/jobs/", {"tenant": other.slug, "workload": "digits-cnn", "params": PARAMS}, format="json")
    assert r.status_code == 201, r.content


def test_an_out_of_memory_beside_another_catalog_profile_run_is_not_remembered(cluster, tenant, fail_profile, submit):
    """A catalog job's profile run has no placement; it held memory on the device all the same (Note [Profile runs
    are tenants on their device] in placement.tenancy), so the failure beside it says nothing about the job."""
    from zico.tenants.models import Tenant

    other = Tenant.objects.create(name="Other", slug="other-profiling", max_running_jobs=100)
    beside = _job(other, params={**PARAMS, "batch_size": 16})
    lifecycle.profile([beside], cluster[0])
    failed = fail_profile(_job(tenant, params=_full(PARAMS)), "OutOfMemoryError: CUDA out of memory")
    assert "profile_failure" not in failed.metrics and "out of memory" in failed.failure_reason
    assert submit().status_code == 201


def test_an_out_of_memory_under_its_own_budget_counts_only_against_that_budget(cluster, tenant, fail_profile,
                                                                               submit):
    """Alone on a 16 GiB device, a job held to its own 2 GiB ran out of memory: it needs more than 2 GiB, which
    every device here has, so an identical job is accepted and profiled (Note [An out-of-memory says what the run
    had])."""
    job = _job(tenant, params=_full(PARAMS))
    Job.objects.filter(pk=job.pk).update(budget_bytes=2 * GiB)
    job.refresh_from_db()
    failed = fail_profile(job, "OutOfMemoryError: CUDA out of memory")
    assert failed.metrics["profile_failure"]["budget_bytes"] == 2 * GiB
    assert failed.metrics["profile_failure"]["own_budget"] is True
    assert submit().status_code == 201


def test_an_out_of_memory_beside_a_neighbour_that_ended_before_the_report_is_not_remembered(cluster, tenant,
                                                                                             fail_profile, submit):
    """The neighbour held the device's memory while the profile ran and ended before the profile's failure
    reached the web side: it still counts as running beside it."""
    neighbour = _job(tenant, params={"iterations": 9})
    MemoryProfile.record(neighbour, triangular_curve(GiB, 2 * GiB, 0.2))
    transition(neighbour, "ready")
    job = _job(tenant, params=_full(PARAMS))
    transition(job, "profiling", device=cluster[0])
    placement = lifecycle.place(cluster[0], [neighbour])
    placement.end("the neighbour finished")
    link = Link(settings_redis_url(), keys.device_key(cluster[0].kind, cluster[0].node.host, cluster[0].index))
    link.emit("profile_done", job=job.pk, error="OutOfMemoryError: CUDA out of memory")
    link.flush()
    consumer = ControlConsumer(settings_redis_url(), name="known-needs-ended", block_ms=20)
    for _ in range(4):
        consumer.step()
    job.refresh_from_db()
    assert job.status == "failed" and "profile_failure" not in job.metrics
    assert submit().status_code == 201


def settings_redis_url():
    from django.conf import settings

    return settings.REDIS_URL


def _store_archive(archive, files: dict[str, bytes]) -> None:
    """Write ``files`` as the tar.gz the CodeArchive row names (its ``path``)."""
    import io
    import tarfile

    archive.path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive.path, "w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
