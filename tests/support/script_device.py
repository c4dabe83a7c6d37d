"""End-to-end tests' set-up of one CPU device of the demo's size running user scripts submitted with `zico submit`:
the consumer and worker started the documented way, a project of test scripts, the CLI logged in, the jobs
submitted and the scheduler started (used by tests/integration)."""
import json
import shutil
from pathlib import Path

from tests.support.cli import zico
from zico.tenants.models import ApiToken

SCRIPTS = Path(__file__).resolve().parents[1] / "workers" / "user_scripts"


def submit_scripts(stack, tenant_owner, live_server, tmp_path, settings, budget_bytes, scripts, submissions):
    """Start a consumer, a CPU worker (512 MiB capacity, ``budget_bytes``, two slots) and, after submitting
    ``submissions`` (``(name, extra zico submit args, argv)``) of a project holding ``scripts`` (file names in
    tests/workers/user_scripts), the scheduler. Returns ``(device, {name: job id})``."""
    stack.env.update(ZICO_WORKER_API_URL=live_server.url, ZICO_VAR_DIR=str(tmp_path / "var"),
                     ZICO_PROFILE_TIME_LIMIT_S="300", ZICO_JOB_FILES_DIR=str(settings.ZICO_JOB_FILES_DIR))
    settings.ZICO_WORKER_API_URL = live_server.url
    stack.consumer(lost_after_s=15)
    stack.worker("--kind", "cpu", "--capacity", "512MiB", "--budget", str(budget_bytes), "--slots", "2",
                 "--loglevel", "INFO")
    device = stack.registered_device()
    _, owner = tenant_owner
    _, secret = ApiToken.issue(owner, "cli")
    project = tmp_path / "project"
    project.mkdir()
    for name in scripts:
        shutil.copy(SCRIPTS / name, project / name)
    home = tmp_path / "home"
    home.mkdir()
    assert zico(home, "login", live_server.url, "--token", secret).returncode == 0
    ids = {}
    for name, extra, argv in submissions:
        out = zico(home, "submit", "--json", "--name", name, *extra, str(project), "--", *argv)
        assert out.returncode == 0, out.stderr
        ids[name] = json.loads(out.stdout)["job"]["id"]
    stack.scheduler("--interval", "1")
    return device, ids
