"""Browser test in headless Chromium against a live server: submit "your code" through the web form (a real file
upload), land on the job page, and see the worker's output lines, the progress and the output files appear
there live (the lines written to Redis as a worker writes them, zico_contracts.joblog)."""
import re

import pytest
import redis
from django.conf import settings as django_settings
from django.core.files.uploadedfile import SimpleUploadedFile
from playwright.sync_api import expect

from zico.jobs.models import Job
from zico.jobs.outputs import store_output_file
from tests.support.jobs import project
from zico_contracts import joblog


@pytest.fixture
def logs():
    r = redis.Redis.from_url(django_settings.REDIS_URL)
    yield r
    for key in r.scan_iter("zico:job:*:log"):
        r.delete(key)


@pytest.mark.django_db(transaction=True)
def test_submit_your_code_and_watch_its_output_and_files(page, sign_in, personas, logs, settings, tmp_path):
    settings.ZICO_CODE_DIR, settings.ZICO_JOB_FILES_DIR = tmp_path / "code", tmp_path / "jobfiles"
    archive = tmp_path / "project.tar.gz"
    archive.write_bytes(project())
    sign_in(personas.teammate)
    page.goto("/jobs/new/")
    page.get_by_role("link", name="Your code").click()
    page.get_by_label("Job name").fill("browser code")
    page.get_by_label("Command").fill("python train.py")   # first without the archive
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator("#id_archive_error")).to_contain_text("This field is required")
    expect(page.get_by_label("Project archive")).to_be_focused()
    assert not Job.objects.exists()

    page.get_by_label("Project archive").set_input_files(str(archive))
    page.get_by_label("Command").fill("python train.py --epochs 3")
    page.get_by_label("Environment").fill("SEED=7")
    page.get_by_role("button", name="Submit job").click()
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="browser code")
    assert job.command == ["python", "train.py", "--epochs", "3"] and job.env == {"SEED": "7"}
    expect(page.locator("#job-command")).to_have_text("python train.py --epochs 3")
    expect(page.locator("#output-state")).to_contain_text("queued")

    joblog.append(logs, job.pk, [joblog.entry("hello from the project"), joblog.entry("a warning", "stderr")])
    expect(page.locator("#job-output")).to_contain_text("hello from the project")
    expect(page.locator("#job-output .err")).to_have_text("a warning\n")
    # the platform's line is marked as such; a job's line that reads like one is marked as the job's
    joblog.append(logs, job.pk, [joblog.entry("[zico] job stopped by the platform"),
                                 joblog.entry("code unpacked", "system")])
    expect(page.locator("#job-output .sys")).to_have_text("[zico] code unpacked\n")
    expect(page.locator("#job-output")).to_contain_text("[job] [zico] job stopped by the platform")
    Job.objects.filter(pk=job.pk).update(total_iterations=10, progress_iteration=3)
    expect(page.locator("#stat-progress")).to_contain_text("3 / 10")
    expect(page.locator("#output-state")).to_contain_text("iteration 3/10")

    store_output_file(job, "ckpt/model.pt", SimpleUploadedFile("m", b"weights"))
    link = page.locator("#job-files a")
    expect(link).to_have_text("ckpt/model.pt")
    got = page.request.get(link.get_attribute("href"))
    assert got.status == 200 and got.body() == b"weights"
