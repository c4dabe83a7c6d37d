"""Zico's catalog project (``workers/job/catalog_project/train.py``) with a fault injected at one iteration, for
the agent's crash tests: run as a script job by the job process entry (``workers.job.entry``), in its sandbox,
exactly as a device worker runs a catalog job.

    python faulty_train.py --fault KIND [--budget-bytes B] --workload digits-cnn --params '{...}'

``KIND`` is one of segfault, exit3, exception, hang, malloc, escape-budget, escape-scope, escape-bind, greedy,
cuda-illegal-address, none; it strikes inside iteration 2 (entered as a ``zico.iteration()`` block: the gate let it
start and its forward phase is marked), after the job has held pool memory for two iterations. ``none`` trains
normally. Where the job itself ends (segfault, exit3, exception, the out-of-memory error of escape-budget and
escape-bind, cuda-illegal-address) it first writes ``zico-test: fault at <time.monotonic()>`` to stderr: a time before its
process exits, on the clock the test reads too (``CLOCK_MONOTONIC`` is the machine's, the sandbox's too), from
which the test times how soon its chunks are back. ``B`` (default 256 MiB) sizes the malloc and escape faults.

``cuda-illegal-address`` (a job on a CUDA device) makes its CUDA context unusable for good: a kernel that stores to
address 0x10, written in PTX and launched through the CUDA driver API with ctypes (no compiler needed: the driver
compiles PTX), faults with an illegal memory access (CUDA_ERROR_ILLEGAL_ADDRESS, 700), a *sticky* error: every
later CUDA call of the process fails, and the job ends failed with torch's error at its next use of the device.

``greedy`` is a neighbour that never frees: it allocates 12 MiB tensors through torch (so from the agent's chunks)
and keeps them, and after every out-of-memory error it tries again, until the agent stops it; then it frees
everything and ends ``cancelled``.
"""
import argparse
import ctypes
import os
import runpy
import sys
import time

import zico_job as zico

FAULT_AT = 2
GREEDY_STEP_BYTES = 12 << 20
# st.global.u32 [p], 42 with p a kernel parameter; PTX 7.0 (CUDA 11) for sm_70 and later: the driver JIT-compiles it
POKE_PTX = b""".version 7.0
.target sm_70
.address_size 64
.visible .entry poke(.param .u64 p)
{
    .reg .u64 %rd<2>;
    .reg .u32 %r<2>;
    ld.param.u64 %rd1, [p];
    mov.u32 %r1, 42;
    st.global.u32 [%rd1], %r1;
    ret;
}
"""


def stamp() -> None:
    """The fault begins now (a time before this process exits), for the test's timing."""
    sys.stderr.write(f"zico-test: fault at {time.monotonic():.6f}\n")
    sys.stderr.flush()


def strike(kind: str, budget: int, device: str) -> None:
    import torch
    import zico_allocator as za

    if kind == "segfault":
        stamp()
        ctypes.string_at(0)
    elif kind == "exit3":
        stamp()
        sys.stderr.write("about to exit with code 3\n")
        sys.stderr.flush()
        os._exit(3)
    elif kind == "exception":
        stamp()
        raise RuntimeError(f"injected failure in iteration {FAULT_AT}")
    elif kind == "hang":
        time.sleep(3600)
    elif kind == "malloc":  # 2x the budget with plain malloc (a bytearray), every page written
        held = bytearray(b"\x01") * (2 * budget)
        time.sleep(3600)
        del held
    elif kind == "escape-budget":  # lift the budget from inside, then allocate 2x the budget through torch
        za.set_budget(None, device="cpu")
        try:
            x = torch.ones(2 * budget // 4, dtype=torch.float32)
        except torch.OutOfMemoryError:  # the agent's refusal: the job ends failed with it
            stamp()
            raise
        time.sleep(3600)
        del x
    elif kind == "escape-bind":  # unbind (job 0), then allocate 2x the budget through torch
        with za.bind(0):
            try:
                x = torch.ones(2 * budget // 4, dtype=torch.float32)
            except torch.OutOfMemoryError:  # the agent's refusal: unbound or not, the process's pool is the job's
                stamp()
                raise
            time.sleep(3600)
            del x
    elif kind == "greedy":
        greedy(torch)
    elif kind == "cuda-illegal-address":
        stamp()
        illegal_address(torch, device)
    elif kind == "escape-scope":  # route torch around the allocator, then allocate 2x the budget
        za.set_cpu_scope("off")
        x = torch.ones(2 * budget // 4, dtype=torch.float32)
        time.sleep(3600)
        del x


def illegal_address(torch, device: str) -> None:
    """Launch POKE_PTX's kernel at address 0x10 on ``device``'s primary context (torch's) and wait for it; then let
    torch meet the sticky error. Raises torch's error (or RuntimeError if the fault did not stick)."""
    cuda = ctypes.CDLL("libcuda.so.1")

    def check(rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed: CUresult {rc}")

    torch.cuda.synchronize(device)  # the primary context exists and the job's work so far is done
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    check(cuda.cuDeviceGet(ctypes.byref(dev), torch.device(device).index or 0), "cuDeviceGet")
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    check(cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(POKE_PTX)), "cuModuleLoadData")
    check(cuda.cuModuleGetFunction(ctypes.byref(function), module, b"poke"), "cuModuleGetFunction")
    address = ctypes.c_uint64(0x10)
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(address), ctypes.c_void_p))
    check(cuda.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, None, params, None), "cuLaunchKernel")
    rc = cuda.cuCtxSynchronize()
    sys.stderr.write(f"cuCtxSynchronize after the kernel that stores to 0x10: CUresult {rc}\n")
    sys.stderr.flush()
    torch.cuda.synchronize(device)  # raises: the error is sticky
    torch.ones(1, device=device).sum().item()
    raise RuntimeError(f"the kernel storing to 0x10 left no sticky error (CUresult {rc})")


def greedy(torch) -> None:
    """Until the agent stops the job (its SIGTERM raises the job process's stop into this loop, which ends the
    job ``cancelled``)."""
    held, refusals = [], 0
    try:
        while True:
            try:
                held.append(torch.ones(GREEDY_STEP_BYTES // 4, dtype=torch.float32))
            except torch.OutOfMemoryError:
                refusals += 1  # and again: a greedy job does not take no for an answer
    finally:
        sys.stderr.write(f"greedy: held {len(held) * GREEDY_STEP_BYTES} bytes, refused {refusals} times\n")
        held.clear()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fault", required=True)
    ap.add_argument("--budget-bytes", type=int, default=256 << 20)
    a, rest = ap.parse_known_args()
    if a.fault != "none":
        import torch

        from zico_workloads import training

        original = training.TrainingJob.run_iteration
        device = "cuda" if torch.cuda.is_available() else "cpu"

        def run_iteration(self, i, marks=None):
            if i == FAULT_AT:
                with zico.iteration():  # the gate lets iteration 2 start; its forward phase is marked
                    strike(a.fault, a.budget_bytes, device)
            return original(self, i, marks)

        training.TrainingJob.run_iteration = run_iteration
    import workers.job

    sys.argv = ["train.py", *rest]
    runpy.run_path(os.path.join(os.path.dirname(workers.job.__file__), "catalog_project", "train.py"),
                   run_name="__main__")


if __name__ == "__main__":
    main()
