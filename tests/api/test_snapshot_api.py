"""A PyTorch memory snapshot as a job's curve through the API (zico.jobs.snapshots): POST /api/jobs/{id}/profile/
attaches one to a job with code, /api/curves/ stores one for a job identity (code, command, env), with every
persona; bad files (not a snapshot, a hostile pickle, too big, no segments) are a 400 (413) naming the problem
with nothing stored. The file is a real snapshot of a GPU training run (tests/curves/data)."""
import io
import pickle

import pytest

from zico.jobs.models import Event, Job, MemoryProfile
from tests.support.jobs import project
from zico_workloads.curves.snapshot import snapshot_curve

from .conftest import GIB
from zico.jobs.lifecycle import transition


@pytest.fixture(autouse=True)
def code_dir(settings, tmp_path):
    settings.ZICO_CODE_DIR = tmp_path / "code"


def _file(data: bytes, name="snapshot.pickle"):
    f = io.BytesIO(data)
    f.name = name
    return f


def upload_code(client, tenant="acme") -> int:
    r = client.post("/api/code/", {"archive": _file(project(), "p.tar.gz"), "tenant": tenant}, format="multipart")
    assert r.status_code in (200, 201), r.content
    return r.json()["id"]


@pytest.fixture
def code_job(personas, client_for):
    """A queued job with code, submitted by the teammate (role member in acme)."""
    client = client_for(personas.teammate)
    r = client.post("/api/jobs/", {"tenant": "acme", "code": upload_code(client), "command": ["python", "train.py"],
                                   "budget_bytes": 8 * GIB}, format="json")
    assert r.status_code == 201, r.content
    return Job.objects.get(pk=r.json()["id"])


def attach(client, job, data, **fields):
    return client.post(f"/api/jobs/{job.pk}/profile/", {"snapshot": _file(data), **fields}, format="multipart")


@pytest.mark.parametrize("who", ["teammate", "owner", "staff"])
def test_the_jobs_owner_a_tenant_admin_and_staff_attach_a_snapshot(personas, client_for, code_job, torch_snapshot,
                                                                   who):
    user = getattr(personas, who)
    r = attach(client_for(user), code_job, torch_snapshot)
    assert r.status_code == 201, r.content
    expected = snapshot_curve(torch_snapshot)
    body = r.json()
    assert body["source"] == "torch-snapshot" and body["peak_bytes"] == int(expected.peak_bytes)
    assert body["curve"]["points"] and body["curve"]["meta"]["file"] == "snapshot.pickle"
    profile = MemoryProfile.objects.get(pk=body["id"])
    assert (profile.job_id, profile.uploaded_by, profile.tenant_id) == (code_job.pk, user, None)
    event = Event.objects.get(kind="profile", job=code_job)
    assert event.actor == user and event.details["peak_bytes"] == body["peak_bytes"]
    # the job's own reads show it; its status is the scheduler's to move (queued until the next round)
    read = client_for(personas.viewer).get(f"/api/jobs/{code_job.pk}/profile/").json()
    assert read["id"] == body["id"] and read["source"] == "torch-snapshot"
    assert client_for(personas.viewer).get(f"/api/jobs/{code_job.pk}/").json()["profile"]["id"] == body["id"]


def test_a_viewer_and_the_other_tenant_cannot(personas, client_for, code_job, torch_snapshot, row_counts):
    before = row_counts()
    r = attach(client_for(personas.viewer), code_job, torch_snapshot)
    assert r.status_code == 403 and "owner" in r.json()["detail"]
    assert attach(client_for(personas.outsider), code_job, torch_snapshot).status_code == 404
    assert client_for(personas.outsider).get(f"/api/jobs/{code_job.pk}/profile/").status_code == 404
    assert row_counts() == before


def test_a_teammate_may_not_attach_to_another_members_job(personas, client_for, code_job, torch_snapshot):
    from zico.tenants.models import Role

    personas.tenant.add_member(personas.outsider, Role.MEMBER)  # a second member of acme
    r = attach(client_for(personas.outsider), code_job, torch_snapshot)
    assert r.status_code == 403 and not MemoryProfile.objects.exists()


def _global_pickle(tmp_path) -> bytes:
    """A pickle that would run ``os.system`` (GLOBAL + REDUCE), creating a file if it ever ran."""
    return f"cos\nsystem\n(S'touch {tmp_path}/pwned'\ntR.".encode()


NO_SEGMENTS = pickle.dumps({"segments": [], "device_traces": [[
    {"action": "alloc", "addr": 0x1000, "size": 512, "time_us": 1},
    {"action": "free_completed", "addr": 0x1000, "size": 512, "time_us": 2}]]})


@pytest.mark.parametrize("data, message", [
    (b"not a pickle at all", "not a readable pickle"),
    (pickle.dumps([1, 2, 3]), "expected a dict at the top, got list"),
    (pickle.dumps({"segments": []}), "missing 'device_traces'"),
    (NO_SEGMENTS, "segments: no segment on device 0"),
    (b"", "The submitted file is empty."),
    ("hostile", "refused: the pickle asks to import os.system"),
])
def test_a_bad_file_is_a_400_naming_the_problem_and_stores_nothing(personas, client_for, code_job, row_counts,
                                                                   tmp_path, data, message):
    data = _global_pickle(tmp_path) if data == "hostile" else data
    before = row_counts()
    r = attach(client_for(personas.teammate), code_job, data)
    assert r.status_code == 400, r.content
    assert message in r.json()["snapshot"][0]
    assert row_counts() == before and not (tmp_path / "pwned").exists()


def test_a_snapshot_over_the_limit_is_a_413_and_unread(personas, client_for, code_job, torch_snapshot, row_counts,
                                                       settings):
    settings.ZICO_SNAPSHOT_MAX_BYTES = len(torch_snapshot) - 1
    before = row_counts()
    r = attach(client_for(personas.teammate), code_job, torch_snapshot)
    assert r.status_code == 413 and "ZICO_SNAPSHOT_MAX_BYTES" in r.json()["detail"]
    assert f"{len(torch_snapshot) - 1}" in r.json()["detail"] and row_counts() == before
    settings.ZICO_SNAPSHOT_MAX_BYTES = len(torch_snapshot)  # exactly at the limit: taken
    assert attach(client_for(personas.teammate), code_job, torch_snapshot).status_code == 201


def test_a_peak_the_job_or_no_device_can_hold_is_refused(personas, client_for, code_job, torch_snapshot, devices,
                                                         row_counts):
    peak = int(snapshot_curve(torch_snapshot).peak_bytes)  # 3.6 GiB
    before = row_counts()
    Job.objects.filter(pk=code_job.pk).update(budget_bytes=peak - 1)
    r = attach(client_for(personas.teammate), code_job, torch_snapshot)
    assert r.status_code == 400 and f"needs ≥ {peak} bytes (the peak of its snapshot); its budget_bytes is " \
                                     f"{peak - 1}" in r.json()["snapshot"][0]
    Job.objects.filter(pk=code_job.pk).update(budget_bytes=None)
    for d in devices:
        d.budget_bytes = peak - 1
        d.save()
    r = attach(client_for(personas.teammate), code_job, torch_snapshot)
    assert r.status_code == 400 and f"the largest device budget is {peak - 1} bytes" in r.json()["snapshot"][0]
    assert row_counts() == before


def test_a_catalog_job_takes_no_snapshot_and_a_placed_job_takes_none_now(personas, client_for, code_job,
                                                                        torch_snapshot, row_counts):
    client = client_for(personas.teammate)
    catalog = client.post("/api/jobs/", {"tenant": "acme", "workload": "digits-cnn"}, format="json").json()
    before = row_counts()
    r = client.post(f"/api/jobs/{catalog['id']}/profile/", {"snapshot": _file(torch_snapshot)}, format="multipart")
    assert r.status_code == 400 and "catalog workload digits-cnn" in r.json()["snapshot"][0]
    assert row_counts() == before
    for status in ("profiling", "ready"):
        transition(code_job, status)
        r = attach(client, code_job, torch_snapshot)
        assert r.status_code == 409 and f"is {status}" in r.json()["detail"]
    assert not MemoryProfile.objects.exists()
    transition(code_job, "failed", reason="test")  # an ended job takes one: for its reruns
    assert attach(client, code_job, torch_snapshot).status_code == 201


def test_the_device_index_picks_a_trace_and_a_missing_one_is_named(personas, client_for, code_job, torch_snapshot):
    client = client_for(personas.teammate)
    r = attach(client, code_job, torch_snapshot, device=5)
    assert r.status_code == 400 and "no device 5 in the snapshot" in r.json()["snapshot"][0]
    assert attach(client, code_job, torch_snapshot, device="x").status_code == 400
    assert attach(client, code_job, torch_snapshot, device=0).status_code == 201


# -- /api/curves/: a curve for a job identity --------------------------------------------------------------------
def store(client, code_id, data, command='["python", "train.py"]', **fields):
    return client.post("/api/curves/", {"snapshot": _file(data), "code": code_id, "command": command, **fields},
                       format="multipart")


@pytest.mark.parametrize("who", ["owner", "teammate"])
def test_members_store_a_curve_for_their_code_and_command(personas, client_for, torch_snapshot, who):
    client = client_for(getattr(personas, who))
    code_id = upload_code(client)
    r = store(client, code_id, torch_snapshot, env='{"SEED": "1"}', tenant="acme")
    assert r.status_code == 201, r.content
    body = r.json()
    from zico.jobs.code_models import CodeArchive

    assert (body["code_sha256"], body["command"], body["env"]) == (CodeArchive.objects.get(pk=code_id).sha256,
                                                                   ["python", "train.py"], {"SEED": "1"})
    assert body["peak_bytes"] == int(snapshot_curve(torch_snapshot).peak_bytes) and body["uploaded_by"] == who
    profile = MemoryProfile.objects.get(pk=body["id"])
    assert profile.job is None and profile.tenant == personas.tenant
    # the identity is the one a job with the same code, command and env stores as its params
    job = client.post("/api/jobs/", {"code": code_id, "command": ["python", "train.py"], "env": {"SEED": "1"}},
                      format="json").json()
    assert job["params"] == profile.identity
    assert Event.objects.get(kind="profile", tenant=personas.tenant).details["identity"] == profile.identity
    listed = client_for(personas.viewer).get("/api/curves/").json()["results"]
    assert [c["id"] for c in listed] == [body["id"]] and "curve" not in listed[0]
    assert client_for(personas.viewer).get(f"/api/curves/{body['id']}/").json()["curve"]["source"] == "torch-snapshot"


def test_the_other_tenant_neither_sees_nor_uses_a_tenants_curves(personas, client_for, torch_snapshot, row_counts):
    code_id = upload_code(client_for(personas.teammate))
    body = store(client_for(personas.teammate), code_id, torch_snapshot).json()
    outsider = client_for(personas.outsider)
    assert outsider.get(f"/api/curves/{body['id']}/").status_code == 404
    assert outsider.get("/api/curves/").json()["results"] == []
    before = row_counts()
    r = store(outsider, code_id, torch_snapshot, tenant="rival")  # acme's archive is not rival's
    assert r.status_code == 400 and "no code archive" in r.json()["code"][0]
    r = store(outsider, code_id, torch_snapshot, tenant="acme")
    assert r.status_code == 400 and "no tenant 'acme' among yours" in r.json()["tenant"][0]
    r = store(client_for(personas.viewer), code_id, torch_snapshot, tenant="acme")
    assert r.status_code == 403 and "role member" in r.json()["detail"]
    assert row_counts() == before


@pytest.mark.parametrize("fields, status, where, message", [
    ({"command": "[]"}, 400, "command", "must not be empty"),
    ({"command": '["python", 3]'}, 400, "command[1]", "expected a string"),
    ({"command": "python train.py"}, 400, "command", "not valid JSON"),
    ({"command": "[" * 100_000 + "]" * 100_000}, 400, "command", "nesting too deep"),
    ({"env": '{"LD_PRELOAD": "x"}'}, 400, "env", "reserved"),
    ({"data": b"\x80\x04K\x01."}, 400, "snapshot", "expected a dict at the top, got int"),
])
def test_bad_identity_curves_are_refused_naming_the_field(personas, client_for, torch_snapshot, row_counts, fields,
                                                          status, where, message):
    client = client_for(personas.teammate)
    code_id = upload_code(client)
    before = row_counts()
    data = fields.pop("data", torch_snapshot)
    r = store(client, code_id, data, **fields)
    assert r.status_code == status, r.content
    assert message in str(r.json()[where])
    assert row_counts() == before


def test_form_json_nested_too_deep_is_a_400_on_job_submission_too(personas, client_for):
    client = client_for(personas.teammate)
    code_id = upload_code(client)
    r = client.post("/api/jobs/", {"code": code_id, "command": "[" * 100_000 + "]" * 100_000}, format="multipart")
    assert r.status_code == 400 and "nesting too deep" in r.json()["command"][0]
