"""Users' own environments end to end: projects whose ``requirements.txt`` asks for a small pure-Python package
the worker's environment lacks (humanize, from PyPI: the test's one use of the network), submitted with `zico
submit` to a running stack. The first job's environment is built on the worker's host (its installer lines in
`zico logs -f`) and the script imports the package; a second job with the same requirements reuses it (build
time 0); a requirement no index satisfies fails its job with the installer's words; a project pinning another
torch is refused at submit, naming the line; `zico status` and the job page show the environment a job ran
in.

Real PostgreSQL, real Redis (private), a real web server and the real processes: control consumer, scheduler
service and one CPU device worker, started the documented way.
"""
import json
import shutil
from pathlib import Path

import pytest

from tests.support import cli

from zico.jobs.models import Job
from zico.tenants.models import ApiToken

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SCRIPTS = Path(__file__).resolve().parents[1] / "workers" / "user_scripts"
PACKAGE = "humanize==4.17.0"




def zico(home: Path, *args: str, timeout: float = 180):
    """The `zico` command (tests/support/cli.py), with time for an environment's build."""
    return cli.zico(home, *args, timeout=timeout)


def project(root: Path, name: str, requirements: str) -> Path:
    p = root / name
    p.mkdir()
    shutil.copy(SCRIPTS / "uses_humanize.py", p / "uses_humanize.py")
    (p / "requirements.txt").write_text(requirements)
    return p


@pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap (the user-script sandbox) is not installed")
def test_a_projects_requirements_become_a_cached_environment_its_jobs_import_from(stack, waiter, tenant_owner,
                                                                               live_server, tmp_path, settings, client):
    stack.env.update(ZICO_WORKER_API_URL=live_server.url, ZICO_VAR_DIR=str(tmp_path / "var"),
                     ZICO_PROFILE_TIME_LIMIT_S="300", ZICO_JOB_FILES_DIR=str(settings.ZICO_JOB_FILES_DIR))
    settings.ZICO_WORKER_API_URL = live_server.url
    stack.consumer(lost_after_s=15)
    stack.worker("--kind", "cpu", "--capacity", "2GiB", "--budget", "1GiB", "--slots", "2", "--loglevel", "INFO")
    stack.registered_device()
    _, owner = tenant_owner
    _, secret = ApiToken.issue(owner, "cli")
    home = tmp_path / "home"
    home.mkdir()
    assert zico(home, "login", live_server.url, "--token", secret).returncode == 0
    good = project(tmp_path, "good", f"# the package this project needs\n{PACKAGE}\n")
    missing = project(tmp_path, "missing", "humanize==0.0.0.1\n")  # no such version: the same package's index
    pinned = project(tmp_path, "pinned", f"{PACKAGE}\ntorch==2.0.0\n")

    refused = zico(home, "submit", "--json", str(pinned), "--", "python", "uses_humanize.py")
    assert refused.returncode != 0
    assert "requirements.txt line 2: 'torch==2.0.0': torch is provided by the device's worker" in refused.stderr

    def submit(path: Path, name: str, *args: str) -> int:
        out = zico(home, "submit", "--json", "--name", name, str(path), "--", "python", "uses_humanize.py", *args)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["job"]["id"]

    first = submit(good, "first")
    stack.scheduler("--interval", "1")
    followed = zico(home, "logs", "-f", str(first), timeout=600)
    assert followed.returncode == 0, followed.stdout + followed.stderr
    text = followed.stdout + followed.stderr
    assert f"environment: requirements.txt asks for {PACKAGE}" in text, text
    assert f" + {PACKAGE}" in text  # the installer's own lines, streamed into the job's log
    assert "humanize 4.17.0: the model holds" in text
    job = Job.objects.get(pk=first)
    env = job.metrics["environment"]
    assert job.status == "succeeded" and env["packages"] == [PACKAGE] and not env["cached"] and env["build_s"] > 0
    second, bad = submit(good, "second", "--again"), submit(missing, "missing")
    waiter(lambda: all(Job.objects.get(pk=i).status in ("succeeded", "failed") for i in (second, bad)), 600,
           "the second and the failing job to end")
    again = Job.objects.get(pk=second)
    assert again.status == "succeeded", again.failure_reason
    assert again.metrics["environment"] == {**env, "build_s": 0.0, "cached": True}  # the same environment, reused
    shown_log = zico(home, "logs", str(second))
    log = shown_log.stdout + shown_log.stderr  # the platform's own lines are on stderr
    assert f"environment {env['key'][:12]} reused (build time 0 s): {PACKAGE}" in log, log
    failed = Job.objects.get(pk=bad)
    assert failed.status == "failed" and "the installer could not build the job's environment" in \
        failed.failure_reason and "humanize==0.0.0.1" in failed.failure_reason, failed.failure_reason
    shown = zico(home, "status", str(second)).stdout
    assert f"environment  {env['key'][:12]} (reused)\n" + " " * 19 + PACKAGE in shown, shown
    client.force_login(owner)
    page = client.get(f"/jobs/{second}/").content.decode()  # the job page shows it too
    assert f'<td class="mono" id="job-environment"><span title="sha256 {env["key"]}">{env["key"][:12]}</span> · ' \
           f"reused<br>{PACKAGE}</td>" in page, page[page.find("job-environment") - 200:][:600]
    print(f"\nenvironment build: cold {env['build_s']:.2f} s, cached {again.metrics['environment']['build_s']} s")
