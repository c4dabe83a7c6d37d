"""A user's PyTorch snapshot stands for a job's profile (zico.jobs.snapshots, Note [Known memory needs] in
zico.jobs.known): a queued job with code that has one goes ready at the next round and is never profiled; its
reruns, and jobs of a curve uploaded for the identity (code, command, env) before any ran, take it too, but only
within the tenant that uploaded it, while a measured curve still serves every identical job. Uploads go through the
real API as tenant members; real PostgreSQL and the real Redis broker; the snapshot is a real GPU run's."""
import io
import uuid

import pytest
from rest_framework.test import APIClient

from placement.curves import triangular_curve
from zico.jobs.models import Event, Job, MemoryProfile
from tests.support.jobs import project
from zico.scheduling.service import PROFILE_TASK, RUN_TASK, Scheduler
from zico.tenants.models import Role, Tenant

from .conftest import GiB
from zico.jobs.lifecycle import transition

pytestmark = pytest.mark.django_db(transaction=True)


def _file(data: bytes, name: str):
    f = io.BytesIO(data)
    f.name = name
    return f


class Member:
    """A member (role member) of a fresh tenant, with an API client; every tenant uploads the same project bytes,
    so identical commands in two tenants are identical jobs."""

    def __init__(self):
        from django.contrib.auth import get_user_model

        slug = f"t-{uuid.uuid4().hex[:6]}"
        self.tenant = Tenant.objects.create(name=slug, slug=slug, max_running_jobs=100)
        user = get_user_model().objects.create_user(f"member-{slug}")
        self.tenant.add_member(user, Role.MEMBER)
        self.client = APIClient()
        self.client.force_login(user)
        r = self.client.post("/api/code/", {"archive": _file(project(), "p.tar.gz")}, format="multipart")
        assert r.status_code == 201, r.content
        self.code = r.json()["id"]

    def submit(self, command=("python", "train.py"), env=None) -> Job:
        r = self.client.post("/api/jobs/", {"code": self.code, "command": list(command), "env": env or {}},
                             format="json")
        assert r.status_code == 201, r.content
        return Job.objects.get(pk=r.json()["id"])

    def attach(self, job, snapshot):
        r = self.client.post(f"/api/jobs/{job.pk}/profile/", {"snapshot": _file(snapshot, "s.pickle")},
                             format="multipart")
        assert r.status_code == 201, r.content
        return MemoryProfile.objects.get(pk=r.json()["id"])

    def upload_curve(self, snapshot, command=("python", "train.py"), env=None):
        import json

        r = self.client.post("/api/curves/", {"snapshot": _file(snapshot, "s.pickle"), "code": self.code,
                                              "command": json.dumps(list(command)),
                                              "env": json.dumps(env or {})}, format="multipart")
        assert r.status_code == 201, r.content
        return MemoryProfile.objects.get(pk=r.json()["id"])


@pytest.fixture
def member(db, settings, tmp_path):
    settings.ZICO_CODE_DIR = tmp_path / "code"
    return Member


def _sent(queued_messages, cluster, job):
    return [task for d in cluster for task, args in queued_messages(d.queue) if args[0] == job.pk]


def test_a_queued_job_with_a_snapshot_goes_ready_and_is_placed_with_it_unprofiled(cluster, member, torch_snapshot,
                                                                                 queued_messages):
    acme = member()
    job = acme.submit()
    profile = acme.attach(job, torch_snapshot)
    res = Scheduler().run_round()
    job.refresh_from_db()
    assert job.pk in res.ready and job.pk not in res.profiling
    assert job.status == "placed" and job.pk in res.placed  # ready, then placed in the same round
    assert Event.objects.filter(job=job, kind="status_change", details__to="ready",
                                details__reason="memory curve known").exists()
    assert not Event.objects.filter(job=job, details__to="profiling").exists()
    [task] = _sent(queued_messages, cluster, job)
    assert task == RUN_TASK
    placement = job.active_placement()
    assert placement.plan["mode"] != "profile" and job.latest_profile() == profile


def test_reruns_in_the_tenant_reuse_a_snapshot_and_another_tenant_profiles_its_own(cluster, member, torch_snapshot,
                                                                                  queued_messages):
    acme, rival = member(), member()
    first = acme.submit()
    transition(first, "cancelled", reason="test")  # ended: its snapshot serves its reruns
    profile = acme.attach(first, torch_snapshot)
    rerun, theirs = acme.submit(), rival.submit()
    assert rerun.params == theirs.params == first.params  # identical jobs
    res = Scheduler().run_round()
    rerun.refresh_from_db()
    theirs.refresh_from_db()
    assert rerun.pk in res.ready and rerun.status in ("ready", "placed")
    event = Event.objects.get(job=rerun, details__to="ready")
    assert event.details["reason"] == "memory curve of an identical job reused; not profiled"
    assert event.details["profile_of_job"] == first.pk
    copy = rerun.latest_profile()
    assert copy.source == "torch-snapshot" and copy.peak_bytes == profile.peak_bytes
    # the rival tenant's identical job is not placed on acme's word: it is profiled as its run starts
    assert theirs.pk in res.profiling and theirs.status == "profiling" and not theirs.profiles.exists()


def test_a_curve_uploaded_for_an_identity_serves_its_jobs_only(cluster, member, torch_snapshot):
    acme, rival = member(), member()
    uploaded = acme.upload_curve(torch_snapshot, env={"SEED": "1"})
    same, other_env, other_cmd = acme.submit(env={"SEED": "1"}), acme.submit(env={"SEED": "2"}), \
        acme.submit(command=("python", "eval.py"), env={"SEED": "1"})
    theirs = rival.submit(env={"SEED": "1"})
    res = Scheduler().run_round()
    assert res.ready == [same.pk]
    event = Event.objects.get(job=same, details__to="ready")
    assert event.details["reason"] == "memory curve from a snapshot uploaded for this code and command; not profiled"
    assert event.details["profile"] == uploaded.pk
    assert same.latest_profile().curve == uploaded.curve
    for job in (other_env, other_cmd, theirs):
        assert not job.profiles.exists() and job.pk not in res.ready


def test_a_measured_curve_still_serves_every_tenant_and_the_newest_curve_wins(cluster, member, torch_snapshot):
    acme, rival = member(), member()
    measured_job = rival.submit()
    transition(measured_job, "cancelled", reason="test")
    measured = MemoryProfile.record(measured_job, triangular_curve(GiB, 2 * GiB, 0.2))  # as a worker's profile
    uploaded = acme.upload_curve(torch_snapshot)  # newer than the measured one
    mine, theirs = acme.submit(), rival.submit()
    Scheduler().run_round()
    assert mine.latest_profile().peak_bytes == uploaded.peak_bytes != measured.peak_bytes
    assert theirs.latest_profile().peak_bytes == measured.peak_bytes  # rival never sees acme's snapshot
    MemoryProfile.objects.filter(pk=measured.pk).update(created_at=uploaded.created_at.replace(year=2100))
    later = acme.submit()
    Scheduler().run_round()
    assert later.latest_profile().peak_bytes == measured.peak_bytes  # now the newer one


def test_a_snapshot_for_a_job_already_profiling_is_refused_and_the_profile_goes_on(cluster, member, torch_snapshot,
                                                                                 queued_messages):
    acme = member()
    job = acme.submit()
    Scheduler().run_round()
    job.refresh_from_db()
    assert job.status == "profiling"
    r = acme.client.post(f"/api/jobs/{job.pk}/profile/", {"snapshot": _file(torch_snapshot, "s.pickle")},
                         format="multipart")
    assert r.status_code == 409 and not job.profiles.exists()
    assert PROFILE_TASK not in _sent(queued_messages, cluster, job)  # a script is profiled by its run_job
