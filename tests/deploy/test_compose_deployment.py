"""The deployment's shape, checked without Docker (scripts/compose-check.sh runs it for real): the CPU worker
profile beside the GPU worker, the sandbox privileges of the worker services and nothing else, the seccomp
profile's rules, the check's override limited to what a host without GPU or registry lacks, and a Dockerfile
whose base images are build arguments and whose source is copied whole."""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WORKERS = ("gpu-worker-0", "cpu-worker")
# what bubblewrap calls to build a sandbox as root: these must never be denied by the workers' profile
BWRAP_SYSCALLS = {"unshare", "clone", "clone3", "mount", "umount2", "pivot_root", "setns", "sethostname",
                  "prctl", "capset", "setuid", "setgid", "setgroups", "setrlimit", "prlimit64", "chroot"}


def _compose(*files: str, profile: str = "cpu", key: str = "services") -> dict:
    args = [a for f in files for a in ("-f", f)]
    env = {**os.environ, "ZICO_FIRST_HOST_NETWORK": "zicocheck_default"}
    out = subprocess.run(["docker-compose", *args, "--profile", profile, "config"], cwd=REPO, capture_output=True,
                         text=True, env=env)
    assert out.returncode == 0, out.stderr
    return yaml.safe_load(out.stdout)[key]


def _norm(value):
    """A compose value with its lists' order dropped (merges may reorder them)."""
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    if isinstance(value, list):
        return sorted(json.dumps(_norm(v), sort_keys=True) for v in value)
    return value


needs_compose = pytest.mark.skipif(not shutil.which("docker-compose"), reason="docker-compose not installed")


@needs_compose
def test_cpu_worker_is_a_profile_sharing_the_image_of_every_service():
    services = _compose("docker-compose.yml")
    assert services["cpu-worker"]["profiles"] == ["cpu"] and "profiles" not in services["gpu-worker-0"]
    cpu = services["cpu-worker"]
    assert {s.get("image") for n, s in services.items() if "build" in s} == {"zico:latest"}
    from workers.bootstrap import parse_args

    assert cpu["command"][:3] == ["python", "-m", "workers"]
    args = parse_args(cpu["command"][3:])
    assert (args.kind, args.capacity, args.slots) == ("cpu", 3 << 30, 2)
    assert cpu["environment"]["ZICO_HOST"] and "DATABASE_URL" in cpu["environment"]


@needs_compose
def test_only_the_worker_services_get_the_sandbox_privileges():
    services = _compose("docker-compose.yml")
    for name, service in services.items():
        assert not service.get("privileged"), name
        if name in WORKERS:
            assert sorted(service["cap_add"]) == ["NET_ADMIN", "SYS_ADMIN"], name
            (opt,) = service["security_opt"]
            kind, path = re.split("[=:]", opt, maxsplit=1)  # compose prints seccomp:PATH
            assert kind == "seccomp" and (REPO / path).resolve() == REPO / "deploy" / "seccomp-worker.json", opt
        else:
            assert "cap_add" not in service and "security_opt" not in service, name


def test_worker_seccomp_profile_denies_kernel_wide_calls_and_never_what_bwrap_needs():
    profile = json.loads((REPO / "deploy" / "seccomp-worker.json").read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    denied = {n for rule in profile["syscalls"] if rule["action"] != "SCMP_ACT_ALLOW" for n in rule["names"]}
    assert {"kexec_load", "init_module", "finit_module", "bpf", "ptrace", "open_by_handle_at", "reboot",
            "keyctl", "perf_event_open", "userfaultfd"} <= denied
    assert not denied & BWRAP_SYSCALLS, denied & BWRAP_SYSCALLS


@needs_compose
def test_check_override_changes_only_base_images_build_arguments_and_the_gpu_profile():
    base = _compose("docker-compose.yml")
    both = _compose("docker-compose.yml", "deploy/compose-check/override.yml")
    assert set(both) == set(base)
    for name, service in both.items():
        changed = {k for k in set(service) | set(base[name]) if _norm(service.get(k)) != _norm(base[name].get(k))}
        if name == "gpu-worker-0":  # the GPU worker moves to a profile of its own
            assert changed == {"profiles"} and service["profiles"] == ["gpu"], changed
        else:
            assert changed <= {"image", "build"}, (name, changed)
        if "build" in service and name != "gpu-worker-0":
            assert set(service["build"]["args"]) >= {"PYTHON_IMAGE", "NODE_IMAGE"}
    assert both["postgres"]["image"].startswith("zico-standin/") and both["redis"]["image"].startswith("zico-standin/")
    host2 = _compose("docker-compose.yml", "deploy/compose-check/override.yml", "deploy/compose-check/second-host.yml",
                     key="networks")  # the second host's project joins the first's network
    assert host2 == {"default": {"external": True, "name": "zicocheck_default"}}


def test_dockerfile_takes_base_images_as_arguments_and_copies_the_source_whole():
    text = (REPO / "Dockerfile").read_text()
    assert "ARG PYTHON_IMAGE=python:3.11-slim-bookworm" in text and "ARG NODE_IMAGE=node:20-slim" in text
    assert re.findall(r"^FROM (\S+)", text, re.M) == ["${NODE_IMAGE}", "${PYTHON_IMAGE}", "${PYTHON_IMAGE}",
                                                     "${PYTHON_IMAGE}"]
    assert "COPY . /src" in text and "RUN rm -rf /src/deploy/build" in text  # build inputs never in the image
    copies = re.findall(r"^COPY (?!--from)(.+)$", text, re.M)
    assert all(src.split()[0] in {".", "deploy/build", "requirements.lock", "frontend/package.json"}
               for src in copies), copies
    ignored = (REPO / ".dockerignore").read_text().split()
    assert "deploy/build" not in ignored and ".venv" in ignored and "var" in ignored
