"""The torch shim's CUDAPluggableAllocator entry points, exercised on CPU: a C++ probe links the shim
and drives a host-backed pool standing in for a CUDA device. A refused request must raise
c10::OutOfMemoryError (torch.OutOfMemoryError in Python) — CUDAPluggableAllocator does not check
for NULL, so returning it would hand torch a tensor at address 0."""
import subprocess
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from zico_allocator import build  # noqa: E402

PROBE = Path(__file__).with_name("cuda_entry_probe.cpp")


@pytest.mark.timeout(300)
def test_a_refused_cuda_request_raises_out_of_memory(tmp_path):
    from torch.utils import cpp_extension

    shim, core = build.ensure_shim(), build.ensure_core()
    torch_lib = Path(torch.__file__).parent / "lib"
    binary = tmp_path / "probe"
    cmd = ["g++", "-std=c++17", "-O1", f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
           *(f"-I{p}" for p in cpp_extension.include_paths()), f"-I{build.SOURCE_DIR / 'include'}", str(PROBE),
           "-o", str(binary), f"-L{shim.parent}", "-l:" + shim.name, f"-L{core.parent}", "-lzico_core",
           f"-L{torch_lib}", "-lc10", f"-Wl,-rpath,{shim.parent}:{core.parent}:{torch_lib}"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=240)
    out = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "served: yes" in out.stdout
    assert "raised OutOfMemoryError: Zico pool on CUDA device 5" in out.stdout, out.stdout
    assert '"num_ooms":1' in out.stdout and '"allocated_bytes.all.current":0' in out.stdout
