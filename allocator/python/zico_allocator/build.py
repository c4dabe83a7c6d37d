"""Builds the native allocator: `python -m zico_allocator.build` (what the project's setup calls).

Configures and builds allocator/ with CMake into a gitignored build directory, and the torch shim
(the CPU shim plus the CUDAPluggableAllocator entry points: a ~2 s g++ build against the installed
torch's c10 headers, cached per torch version). The
binding calls `ensure_core()` / `ensure_shim()` lazily, so a fresh checkout also works; a file
lock (fcntl) keeps two processes from building at once, and sources newer than the last build make
it stale.

Environment: ZICO_ALLOCATOR_BUILD_DIR overrides the build root (default: allocator/build).
Errors: BuildError (a RuntimeError) with the failing command's output.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parents[2]  # .../allocator
CORE_LIB = "libzico_core.so"
CUDA_LIB = "libzico_cuda.so"
SHIM_LIB = "libzico_torch_shim.so"
SHIM_SOURCES = ("cpu_shim.cpp", "cuda_entry.cpp")


class BuildError(RuntimeError):
    """A native build step failed; the message holds the command and its output."""


def build_root() -> Path:
    return Path(os.environ.get("ZICO_ALLOCATOR_BUILD_DIR", SOURCE_DIR / "build"))


def _sources(*parts: str) -> list[Path]:
    files: list[Path] = [SOURCE_DIR / "CMakeLists.txt", SOURCE_DIR / "exports.map"]
    for part in parts:
        files += [p for p in (SOURCE_DIR / part).rglob("*") if p.is_file()]
    return files


def _stale(output: Path, sources: list[Path]) -> bool:
    if not output.exists():
        return True
    built = output.stat().st_mtime
    return any(s.stat().st_mtime > built for s in sources)


@contextlib.contextmanager
def _lock(root: Path):
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".build.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")


def cmake_build(build_dir: Path, *, defines: dict[str, str] | None = None, targets: list[str] | None = None) -> None:
    """Configures (once) and builds the CMake project in `build_dir`."""
    if not shutil.which("cmake"):
        raise BuildError("cmake is not installed; it is needed to build the Zico allocator")
    if not (build_dir / "CMakeCache.txt").exists() or defines:
        cmd = ["cmake", "-S", str(SOURCE_DIR), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release"]
        if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
            cmd += ["-G", "Ninja"]
        cmd += [f"-D{k}={v}" for k, v in (defines or {}).items()]
        _run(cmd)
    cmd = ["cmake", "--build", str(build_dir), "--parallel", "2"]
    for t in targets or []:
        cmd += ["--target", t]
    _run(cmd)


def core_dir() -> Path:
    return build_root() / "release"


def ensure_core() -> Path:
    """Path of libzico_core.so, (re)building it first when missing or stale."""
    lib = core_dir() / CORE_LIB
    sources = _sources("include", "src")
    if not _stale(lib, sources):
        return lib
    with _lock(build_root()):
        if _stale(lib, sources):
            cmake_build(core_dir())
            lib.touch()
    return lib


def cuda_library() -> Path | None:
    """Path of libzico_cuda.so, or None when the CUDA toolkit was not found at build time."""
    ensure_core()
    lib = core_dir() / CUDA_LIB
    return lib if lib.exists() else None


def ensure_shim() -> Path:
    """Path of the torch shim (CPU shim + CUDA entry points) for the installed torch, built when
    missing or stale.

    Imports torch (only to read its version, headers and C++ ABI). Raises BuildError when g++ fails.
    """
    import torch
    from torch.utils import cpp_extension

    core = ensure_core()
    out_dir = build_root() / "shim" / f"torch-{torch.__version__}"
    lib = out_dir / SHIM_LIB
    sources = [SOURCE_DIR / "shim" / name for name in SHIM_SOURCES]
    sources += [SOURCE_DIR / "include" / "zico" / "zico.h", SOURCE_DIR / "exports.map", core]
    if not _stale(lib, sources):
        return lib
    with _lock(build_root()):
        if _stale(lib, sources):
            out_dir.mkdir(parents=True, exist_ok=True)
            torch_lib = Path(torch.__file__).parent / "lib"
            abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
            cmd = [os.environ.get("CXX", "g++"), "-std=c++17", "-O2", "-fPIC", "-shared",
                   f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]
            cmd += [f"-I{p}" for p in cpp_extension.include_paths()]
            cmd += [f"-I{SOURCE_DIR / 'include'}", *(str(SOURCE_DIR / "shim" / n) for n in SHIM_SOURCES),
                    "-o", str(lib) + ".tmp", f"-L{torch_lib}", "-lc10", f"-L{core.parent}", "-lzico_core",
                    f"-Wl,-rpath,{torch_lib}", f"-Wl,-rpath,{core.parent}",
                    f"-Wl,--version-script={SOURCE_DIR / 'exports.map'}"]
            _run(cmd)
            os.replace(str(lib) + ".tmp", lib)
    return lib


def build_stress(sanitize: str, target: str = "zico_stress") -> Path:
    """Builds a stress binary (`zico_stress`: the pool; `zico_agent_stress`: the agent pool across
    processes) with `sanitize` ('address' = ASan+UBSan, 'thread' = TSan)."""
    if sanitize not in ("address", "thread"):
        raise ValueError(f"sanitize must be 'address' or 'thread', not {sanitize!r}")
    if target not in ("zico_stress", "zico_agent_stress"):
        raise ValueError(f"target must be zico_stress or zico_agent_stress, not {target!r}")
    build_dir = build_root() / f"stress-{sanitize}"
    binary = build_dir / target
    sources = _sources("include", "src", "stress")
    if _stale(binary, sources):
        with _lock(build_root()):
            if _stale(binary, sources):
                cmake_build(build_dir, defines={"ZICO_SANITIZE": sanitize, "ZICO_BUILD_STRESS": "ON",
                                                "ZICO_WITH_CUDA": "OFF", "CMAKE_BUILD_TYPE": "RelWithDebInfo"},
                            targets=[target])
                binary.touch()
    return binary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the Zico native allocator.")
    parser.add_argument("--no-shim", action="store_true", help="skip the torch shim (needs torch)")
    args = parser.parse_args(argv)
    core = ensure_core()
    print(f"core: {core}")
    cuda = core.parent / CUDA_LIB
    print(f"cuda upstream: {cuda if cuda.exists() else 'not built (CUDA toolkit not found)'}")
    if not args.no_shim:
        try:
            print(f"torch shim: {ensure_shim()}")
        except ImportError:
            print("torch shim: skipped (torch is not installed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
