"""POST /api/jobs/ with code: a command in an uploaded project, its env rule (Note [Job environment rule]), and
the run spec the scheduler sends for it (zico_contracts.codejob), with every persona."""
import io

import pytest

from zico.cluster.models import Placement
from zico.jobs.models import Job
from tests.support.jobs import project
from zico_contracts.codejob import CodeSpec


@pytest.fixture(autouse=True)
def code_dir(settings, tmp_path):
    settings.ZICO_CODE_DIR = tmp_path / "code"


def upload(client, tenant="acme") -> int:
    f = io.BytesIO(project())
    f.name = "p.tar.gz"
    r = client.post("/api/code/", {"archive": f, "tenant": tenant}, format="multipart")
    assert r.status_code in (200, 201), r.content
    return r.json()["id"]


@pytest.fixture
def code_id(personas, client_for):
    return upload(client_for(personas.teammate))


def spec(code_id, **over):
    return {"tenant": "acme", "name": "my code", "code": code_id, "command": ["python", "train.py", "--lr", "0.1"],
            "env": {"WANDB_MODE": "offline", "SEED": "7"}, "budget_bytes": 1 << 30, "priority": 5, **over}


@pytest.mark.parametrize("who", ["owner", "teammate"])
def test_members_submit_a_command_in_their_project(personas, client_for, code_id, who):
    r = client_for(getattr(personas, who)).post("/api/jobs/", spec(code_id), format="json")
    assert r.status_code == 201, r.content
    body = r.json()
    assert (body["code"], body["workload"]) == (code_id, "")
    from zico.jobs.code_models import CodeArchive

    # a command job's identity stands where a catalog job's params do: code, command and env (known.identical)
    assert body["params"] == {"code_sha256": CodeArchive.objects.get(pk=code_id).sha256,
                              "command": body["command"], "env": body["env"]}
    assert body["command"] == ["python", "train.py", "--lr", "0.1"] and body["env"] == {"WANDB_MODE": "offline",
                                                                                          "SEED": "7"}
    assert (body["status"], body["budget_bytes"], body["priority"]) == ("queued", 1 << 30, 5)
    assert str(Job.objects.get(pk=body["id"])) == "my code"
    listed = client_for(personas.viewer).get("/api/jobs/").json()["results"]
    assert [j for j in listed if j["id"] == body["id"]][0]["command"] == body["command"]  # the list's fast path


def test_the_viewer_and_the_other_tenant_cannot(personas, client_for, code_id, row_counts):
    before = row_counts()
    assert client_for(personas.viewer).post("/api/jobs/", spec(code_id), format="json").status_code == 403
    r = client_for(personas.outsider).post("/api/jobs/", spec(code_id, tenant="rival"), format="json")
    assert r.status_code == 400 and "no code archive" in r.json()["code"][0]  # acme's archive is not rival's
    assert row_counts() == before


@pytest.mark.parametrize("change,field,message", [
    ({"command": []}, "command", "must not be empty"),
    ({"command": "python train.py"}, "command", "expected a list of strings"),
    ({"command": ["python", 3]}, "command[1]", "expected a string"),
    ({"command": None}, "command", "may not be null"),
    ({"command": ["python", "a\x00b"]}, "command[1]", "NUL"),
    ({"command": ["python", "-O", "train.py"]}, "command", "python option -O is not supported"),  # as the job runs it
    ({"command": ["python", "-c", "print(1)"]}, "command", "python option -c is not supported"),
    ({"command": ["python3", "-u"]}, "command", "python needs a script to run"),
    ({"env": {"ZICO_JOB": "1"}}, "env.ZICO_JOB", "reserved"),
    ({"env": {"LD_PRELOAD": "/tmp/x.so"}}, "env.LD_PRELOAD", "reserved"),
    ({"env": {"PYTHONPATH": "/x"}}, "env.PYTHONPATH", "reserved"),
    ({"env": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}}, "env.PYTORCH_CUDA_ALLOC_CONF", "reserved"),
    ({"env": {"CUDA_VISIBLE_DEVICES": "1"}}, "env.CUDA_VISIBLE_DEVICES", "set by the worker"),
    ({"env": {"lower": "x"}}, "env.lower", "[A-Z_][A-Z0-9_]*"),
    ({"env": {"SEED": 7}}, "env.SEED", "expected a string"),
    ({"env": ["SEED=7"]}, "env", "expected an object"),
    ({"workload": "digits-cnn"}, "workload", "not both"),
    ({"params": {"batch_size": 8}}, "params", "belong to a catalog workload"),
    ({"code": 999999}, "code", "no code archive 999999"),
    ({"code": None}, "code", "required with a command"),
])
def test_a_bad_code_job_is_refused_naming_the_field_and_storing_nothing(personas, client_for, code_id, row_counts,
                                                                        change, field, message):
    before = row_counts()
    r = client_for(personas.teammate).post("/api/jobs/", spec(code_id, **change), format="json")
    assert r.status_code == 400, r.content
    head, _, rest = field.partition(".")
    got = r.json()[head][rest] if rest else r.json()[head]
    assert message in " ".join(got), r.json()
    assert row_counts() == before


def test_the_run_spec_carries_the_code_fields_and_a_token_that_fetches_the_code(personas, client_for, code_id,
                                                                                devices, settings):
    job = Job.objects.get(pk=client_for(personas.teammate).post("/api/jobs/", spec(code_id), format="json")
                          .json()["id"])
    placement = Placement.objects.create(device=devices[0], plan={})
    run = placement.run_spec(job, curve={})
    code = CodeSpec.from_spec(run)
    assert run["workload"] == "" and run["params"]["code_sha256"] == code.code_sha256  # its identity (known.identical)
    assert code.command == job.command and code.env == job.env and code.code_format == "tar.gz"
    assert code.code_url == f"{settings.ZICO_WORKER_API_URL}/api/worker/jobs/{job.pk}/code"
    assert code.code_limits["max_bytes"] == settings.ZICO_CODE_MAX_BYTES
    assert CodeSpec.from_spec(job.profile_spec()).code_sha256 == code.code_sha256
    worker = client_for(None)
    r = worker.get(code.code_url.removeprefix(settings.ZICO_WORKER_API_URL), HTTP_AUTHORIZATION=f"JobToken {code.job_token}")
    assert r.status_code == 200 and r["Content-Type"] == "application/gzip"
    import hashlib

    assert hashlib.sha256(b"".join(r.streaming_content)).hexdigest() == code.code_sha256


def test_a_catalog_jobs_run_spec_has_no_code_fields(personas, devices):
    from zico.jobs.submission import submit_job

    job = submit_job(tenant=personas.tenant, owner=personas.teammate, workload="digits-cnn")
    run = Placement.objects.create(device=devices[0], plan={}).run_spec(job, curve={})
    assert CodeSpec.from_spec(run) is None and "job_token" not in run and "code_url" not in job.profile_spec()


def test_an_archive_in_use_cannot_be_deleted_alone_but_its_tenant_can(personas, client_for, code_id):
    from django.db.models import RestrictedError

    from zico.jobs.models import CodeArchive

    client_for(personas.teammate).post("/api/jobs/", spec(code_id), format="json")
    with pytest.raises(RestrictedError):
        CodeArchive.objects.get(pk=code_id).delete()
    personas.tenant.delete()
    assert not CodeArchive.objects.filter(pk=code_id).exists() and not Job.objects.exists()
