"""Suite-wide pytest setup: skip `gpu`-marked tests where no NVIDIA GPU is visible."""
import shutil
import subprocess

import pytest


def _gpu_visible() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def pytest_collection_modifyitems(config, items):
    if any("gpu" in item.keywords for item in items) and not _gpu_visible():
        skip = pytest.mark.skip(reason="no NVIDIA GPU visible (run scripts/gpu-check.sh on a GPU host)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)
