""""Your code" from the web form to a device and back, in a headless browser: the project uploaded through the
form, run by a real CPU device worker in its sandbox, its output lines appearing on the job page while it runs,
its ``zico.log`` loss charted there with iterations done/total, throughput and ETA, and a file it wrote to its
output directory downloaded through the page's link, byte for byte.

Real PostgreSQL, a private Redis (the web server reads the job's live output from it), a real web server (the
worker fetches the code and uploads the output through the worker-facing API), the control consumer, the
scheduler service and one CPU device worker started the documented way. The script holds at a step until the
test drops a file into the (read-only) data directory, so "while it runs" is an event, not a race. A screenshot
of the running job's page goes to ``$ZICO_SCREENSHOT_DIR`` when set, else to a temporary folder.
"""
import io
import os
import re
import shutil
import tarfile
from pathlib import Path

import pytest
from playwright.sync_api import expect

from zico.jobs.models import Job
from tests.support.tenants import make_personas

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

STEPS, HOLD = 30, 12  # the script's optimizer steps; it waits after step HOLD for the data dir's "go" file
OUTPUT = b"zico output file\n" + bytes(range(256))  # what the script writes to $ZICO_OUTPUT_DIR/result.bin
TRAIN_PY = f'''"""Trains a tiny model, printing and logging its loss each step; holds after step {HOLD} until
$ZICO_DATA_DIR/go exists; writes result.bin to $ZICO_OUTPUT_DIR."""
import os
import time

import torch

import zico

zico.set_iterations_total({STEPS})
torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(256, 16)
y = x @ torch.randn(16, 1)
for step in range({STEPS}):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    zico.log(loss=loss.item())
    print(f"step {{step + 1}} of {STEPS}: loss {{loss.item():.4f}}", flush=True)
    time.sleep(0.05)
    if step + 1 == {HOLD}:
        deadline = time.monotonic() + 300
        while not os.path.exists(os.path.join(os.environ["ZICO_DATA_DIR"], "go")) and time.monotonic() < deadline:
            time.sleep(0.1)
with open(os.path.join(os.environ["ZICO_OUTPUT_DIR"], "result.bin"), "wb") as f:
    f.write({OUTPUT!r})
print("done", flush=True)
'''


def project_archive(path: Path) -> Path:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = TRAIN_PY.encode()
        info = tarfile.TarInfo("train.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    path.write_bytes(buf.getvalue())
    return path


@pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap (the user-script sandbox) is not installed")
def test_your_code_from_the_form_runs_on_a_worker_and_its_page_shows_output_metrics_and_files(
        stack, waiter, redis_server, live_server, page, sign_in, tmp_path, settings):
    stack.env.update(ZICO_WORKER_API_URL=live_server.url, ZICO_VAR_DIR=str(tmp_path / "var"),
                     ZICO_PROFILE_TIME_LIMIT_S="300", ZICO_JOB_FILES_DIR=str(settings.ZICO_JOB_FILES_DIR))
    settings.ZICO_WORKER_API_URL = live_server.url
    settings.REDIS_URL = redis_server.url  # the web server reads live output where the worker writes it
    data_dir = Path(stack.env["ZICO_DATA_DIR"])
    stack.consumer(lost_after_s=15)
    stack.worker("--kind", "cpu", "--capacity", "2GiB", "--budget", "1GiB", "--slots", "2", "--loglevel", "INFO")
    stack.registered_device()
    stack.scheduler("--interval", "1")
    personas = make_personas()

    sign_in(personas.teammate)
    page.goto("/jobs/new/")
    page.get_by_role("link", name="Your code").click()
    page.get_by_label("Job name").fill("browser e2e")
    page.get_by_label("Project archive").set_input_files(str(project_archive(tmp_path / "project.tar.gz")))
    page.get_by_label("Command").fill("python train.py")
    page.get_by_role("button", name="Submit job").click()
    page.wait_for_url(re.compile(r"/jobs/\d+/$"))
    job = Job.objects.get(name="browser e2e")

    # Held after step HOLD of its run: the output, the chart and the progress come while it runs.
    out = page.locator("#job-output")
    expect(out).to_contain_text(f"step {HOLD} of {STEPS}: loss", timeout=600_000)
    waiter(lambda: Job.objects.get(pk=job.pk).status == "running", 60, "the job to run")
    expect(page.locator("#output-state")).to_contain_text(f"running · iteration {HOLD}/{STEPS}", timeout=30_000)
    expect(page.locator("#stat-progress")).to_contain_text(f"{HOLD} / {STEPS}", timeout=30_000)
    expect(page.locator("#stat-throughput")).to_contain_text("it/s")
    expect(page.locator("#stat-eta")).to_contain_text("left")
    loss = page.locator('#metric-charts figure[data-metric="loss"]')
    expect(loss.locator("figcaption")).to_contain_text(f"at iteration {HOLD}", timeout=30_000)
    expect(page.locator("#metrics-empty")).to_be_hidden()
    drawn = loss.locator(".chart").evaluate("el => echarts.getInstanceByDom(el).getOption().series[0].data.length")
    assert drawn >= 2, drawn  # one point per second at most: the run took longer than that before holding
    assert Job.objects.get(pk=job.pk).status == "running"
    shots = Path(os.environ.get("ZICO_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shots / "code-job-running.png"), full_page=True)

    (data_dir / "go").write_text("go")
    expect(page.locator("#job-status")).to_have_text("succeeded", timeout=300_000)
    expect(out).to_contain_text("done")
    expect(page.locator("#output-state")).to_contain_text(f"Ended · succeeded · iteration {STEPS}/{STEPS}")
    expect(loss.locator("figcaption")).to_contain_text(f"at iteration {STEPS}", timeout=30_000)
    link = page.locator("#job-files a", has_text="result.bin")
    expect(link).to_be_visible(timeout=60_000)
    with page.expect_download() as download:
        link.click()
    assert Path(download.value.path()).read_bytes() == OUTPUT
    page.screenshot(path=str(shots / "code-job-finished.png"), full_page=True)
