"""GPU tests of the CUDA upstream (skipped without an NVIDIA GPU): each check in
allocator/gpu_tests/check_cuda_pool.py runs in a fresh process, because the pool must be installed
through CUDAPluggableAllocator before CUDA's first allocation."""
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "allocator" / "gpu_tests" / "check_cuda_pool.py"


@pytest.mark.gpu
@pytest.mark.timeout(300)
@pytest.mark.parametrize("check", ["install", "stream_rule", "two_jobs", "budget"])
def test_cuda_pool_check(check):
    proc = subprocess.run([sys.executable, str(SCRIPT), check], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert f"{check}: ok" in proc.stdout
