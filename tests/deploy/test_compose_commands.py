"""Every service command in docker-compose.yml names an entry point that exists and accepts its arguments; the
optional MPS daemon (profile ``mps``) and the GPU workers agree on its pipe directory."""
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


def test_mps_daemon_is_optional_and_shares_its_pipe_directory_with_the_gpu_workers():
    services = _services()
    daemon = services["mps-daemon"]
    assert daemon["profiles"] == ["mps"]  # only with --profile mps
    assert daemon["command"] == ["nvidia-cuda-mps-control", "-f"]  # in the foreground: the container's process
    # besides it only the CPU device worker has a profile of its own (a host without a GPU: --profile cpu)
    assert {name: s["profiles"] for name, s in services.items() if "profiles" in s} == {
        "mps-daemon": ["mps"], "cpu-worker": ["cpu"]}
    pipe = daemon["environment"]["CUDA_MPS_PIPE_DIRECTORY"]
    assert daemon["environment"]["CUDA_MPS_LOG_DIRECTORY"]

    def mounted_at(service, path):
        return [v.split(":")[0] for v in service["volumes"] if v.split(":")[1] == path]

    [volume] = mounted_at(daemon, pipe)
    workers = {name: s for name, s in services.items() if name.startswith("gpu-worker")}
    assert workers
    for name, worker in workers.items():
        assert worker["environment"]["CUDA_MPS_PIPE_DIRECTORY"] == pipe, name
        assert mounted_at(worker, pipe) == [volume], name
        assert mounted_at(worker, "/var/lib/zico") == ["zico-data"], name  # its own volumes kept
    gpus = {d for w in workers.values() for r in w["deploy"]["resources"]["reservations"]["devices"]
            for d in r["device_ids"]}
    assert gpus <= set(daemon["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"])
