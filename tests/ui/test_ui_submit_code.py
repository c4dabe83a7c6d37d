"""The "your code" submit page and a code job's page: an uploaded project with a command becomes a queued job; a
bad command, env or archive shows inline and stores nothing (no job, no archive row, no file); the job page
shows the command, the output card and the files with download links, to members only."""
import io
import os
from html import unescape

import pytest

from zico.jobs.code import store_archive
from zico.jobs.models import CodeArchive, Job
from zico.jobs.outputs import store_output_file
from zico.jobs.submission import submit_job
from tests.support.jobs import project, tar_gz

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def dirs(settings, tmp_path):
    settings.ZICO_CODE_DIR, settings.ZICO_JOB_FILES_DIR = tmp_path / "code", tmp_path / "jobfiles"
    return settings


def archive_file(data: bytes = None, name="project.tar.gz"):
    f = io.BytesIO(project() if data is None else data)
    f.name = name
    return f


def form(personas, **over):
    data = {"tenant": personas.tenant.pk, "name": "web code", "archive": archive_file(),
            "command": "python train.py --note 'two words'", "env": "SEED=3\nWANDB_MODE=offline\n",
            "budget_gib": "", "priority": "2"}
    data.update(over)
    return data


def stored_nothing(settings):
    files = [f for d, _, fs in os.walk(settings.ZICO_CODE_DIR) for f in fs]
    return not Job.objects.exists() and not CodeArchive.objects.exists() and files == []


def test_the_page_offers_your_code_beside_the_catalog(client_for, personas):
    html = client_for(personas.teammate).get("/jobs/new/code/").content.decode()
    for name in ("archive", "command", "env", "budget_gib", "priority", "tenant", "snapshot"):
        assert f'id="id_{name}"' in html, name
    assert 'enctype="multipart/form-data"' in html and 'aria-current="page" class="tab tab-on">Your code' in html
    assert 'href="/jobs/new/code/"' in client_for(personas.teammate).get("/jobs/new/").content.decode()


def test_a_valid_project_and_command_become_a_queued_job(client_for, personas):
    r = client_for(personas.teammate).post("/jobs/new/code/", form(personas))
    job = Job.objects.get(name="web code")
    assert r.status_code == 302 and r.url == f"/jobs/{job.pk}/"
    assert job.command == ["python", "train.py", "--note", "two words"]
    assert job.env == {"SEED": "3", "WANDB_MODE": "offline"} and (job.priority, job.workload) == (2, "")
    assert job.code.files == 2 and job.owner == personas.teammate


@pytest.mark.parametrize("over,field,message", [
    ({"command": "   "}, "command", "This field is required"),
    ({"command": "python 'unclosed"}, "command", "cannot split it into words"),
    ({"env": "LD_PRELOAD=/tmp/x.so"}, "env", "reserved"),
    ({"env": "no equals sign"}, "env", "expected NAME=value"),
    ({"archive": archive_file(tar_gz([("file", "../../evil.py", b"x")]))}, "archive", "'..' in path"),
    ({"archive": archive_file(b"plain text", "notes.txt")}, "archive", "not a tar.gz or zip archive"),
    ({"budget_gib": "500"}, "budget_gib", "exceeds the largest device"),
])
def test_a_bad_field_shows_inline_and_stores_nothing(client_for, personas, cluster_device, dirs, over, field,
                                                     message):
    r = client_for(personas.teammate).post("/jobs/new/code/", form(personas, **over))
    html = unescape(r.content.decode())
    assert r.status_code == 200 and f'id="id_{field}_error"' in html and message in html, html[-3000:]
    assert 'aria-invalid="true"' in html and "The job was not submitted" in html
    assert stored_nothing(dirs)


@pytest.fixture
def cluster_device(db):
    from zico.cluster.models import Device, Node

    return Device.objects.create(node=Node.objects.create(host="node-w"), index=0, kind="gpu", name="GPU",
                                 uuid="GPU-w0", total_bytes=16 << 30, budget_bytes=16 << 30)


def test_viewers_cannot_open_it(client_for, personas):
    assert client_for(personas.viewer).get("/jobs/new/code/").status_code == 403
    assert client_for(None).get("/jobs/new/code/").status_code == 302


def test_the_job_page_shows_command_output_and_files_to_members_only(client_for, personas):
    archive, _ = store_archive(personas.tenant, archive_file(), personas.teammate)
    job = submit_job(tenant=personas.tenant, owner=personas.teammate, code=archive,
                     command=["python", "train.py"], env={"SEED": "1"})
    from django.core.files.uploadedfile import SimpleUploadedFile

    store_output_file(job, "out/model.pt", SimpleUploadedFile("m", b"weights"))
    html = client_for(personas.viewer).get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="job-command">python train.py<' in html and "SEED" in html
    assert 'id="job-output"' in html and f'data-url="/api/jobs/{job.pk}/logs/"' in html
    assert f'href="/api/jobs/{job.pk}/files/out/model.pt" download>out/model.pt<' in html
    got = client_for(personas.viewer).get(f"/api/jobs/{job.pk}/files/out/model.pt")
    assert b"".join(got.streaming_content) == b"weights"
    assert client_for(personas.outsider).get(f"/jobs/{job.pk}/").status_code == 404
    assert client_for(personas.outsider).get(f"/api/jobs/{job.pk}/files/out/model.pt").status_code == 404


def snapshot_file(data: bytes, name="run.pickle"):
    f = io.BytesIO(data)
    f.name = name
    return f


def test_a_snapshot_attached_on_the_form_becomes_the_jobs_curve(client_for, personas, torch_snapshot):
    from zico_workloads.curves.snapshot import snapshot_curve

    r = client_for(personas.teammate).post("/jobs/new/code/", form(personas, snapshot=snapshot_file(torch_snapshot)))
    job = Job.objects.get(name="web code")
    assert r.status_code == 302 and job.status == "queued"
    profile = job.latest_profile()
    assert profile.source == "torch-snapshot" and profile.uploaded_by == personas.teammate
    assert profile.peak_bytes == int(snapshot_curve(torch_snapshot).peak_bytes)
    html = client_for(personas.viewer).get(f"/jobs/{job.pk}/").content.decode()
    assert '<span class="tag">torch-snapshot</span>' in html  # the curve panel names its source
    assert "memory curve from a PyTorch snapshot (run.pickle) attached, peak" in html  # the job's log


@pytest.mark.parametrize("data, message", [
    (b"not a pickle at all", "not a readable pickle"),
    (b"cos\nsystem\n(S'true'\ntR.", "refused: the pickle asks to import os.system"),
])
def test_a_bad_snapshot_shows_inline_and_stores_nothing(client_for, personas, dirs, data, message):
    r = client_for(personas.teammate).post("/jobs/new/code/", form(personas, snapshot=snapshot_file(data)))
    html = unescape(r.content.decode())
    assert r.status_code == 200 and 'id="id_snapshot_error"' in html and message in html
    assert stored_nothing(dirs)


def test_a_snapshot_over_the_jobs_budget_shows_inline_and_stores_nothing(client_for, personas, dirs, torch_snapshot):
    r = client_for(personas.teammate).post("/jobs/new/code/", form(personas, snapshot=snapshot_file(torch_snapshot),
                                                                   budget_gib="1"))
    html = unescape(r.content.decode())
    assert r.status_code == 200 and 'id="id_snapshot_error"' in html and "its budget_bytes is 1073741824" in html
    assert stored_nothing(dirs)
