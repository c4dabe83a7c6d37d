"""Every service command in docker-compose.yml names an entry point that exists and accepts its arguments."""
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def _services():
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]


def test_gpu_worker_command_parses_with_the_bootstrap_arguments():
    cmd = _services()["gpu-worker-0"]["command"]
    assert cmd[:3] == ["python", "-m", "workers"]
    from workers.bootstrap import parse_args

    args = parse_args(cmd[3:])
    assert (args.kind, args.index) == ("gpu", 0)


def test_management_commands_named_by_compose_exist():
    from django.core.management import get_commands

    for name in ("scheduler", "consumer"):
        cmd = _services()[name]["command"]
        assert cmd[:2] == ["python", "manage.py"] and cmd[2] in get_commands(), cmd


def test_web_command_migrates_collects_static_and_serves_wsgi():
    cmd = _services()["web"]["command"]
    assert "migrate" in cmd and "collectstatic" in cmd and "zico.wsgi" in cmd
    out = subprocess.run([sys.executable, "-c", "import zico.wsgi"], cwd=REPO, capture_output=True, text=True,
                         env={"DEBUG": "1", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
