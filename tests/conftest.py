"""Suite-wide pytest setup: skip `gpu`-marked tests where no NVIDIA GPU is visible; one torch thread for
the folders whose tests train small models."""
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


# Torch runs these folders' tests with one intra-op thread: on shared, loaded cores OpenMP
# synchronisation between two threads costs milliseconds per operator and makes small-model tests
# many times slower. Other tests never import torch for it.
ONE_TORCH_THREAD_DIRS = {"curves", "workloads"}


@pytest.fixture(autouse=True)
def one_torch_thread(request):
    if request.path.parent.name not in ONE_TORCH_THREAD_DIRS:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
