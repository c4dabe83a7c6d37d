"""A real job process (``workers.jobproc``) with a fault injected at one iteration, for the agent's crash tests.

Run as ``python -m faulty_job --spec ...`` (this folder on PYTHONPATH) by a DeviceAgent whose
``job_module`` is ``faulty_job``. The spec's ``params`` go to the workload as usual; the fault is read from
the environment of the agent's process: ``ZICO_TEST_FAULT_<job id>=<kind>`` with ``kind`` one of segfault,
exit3, exception, hang, malloc, escape-budget, escape-scope, escape-bind, greedy, cuda-illegal-address; it strikes inside iteration 2 (forward
pass), after the job has held pool memory for two iterations. A job without a fault trains normally. Where the job
itself ends (segfault, exit3, exception, escape-budget's out-of-memory error, cuda-illegal-address) it first writes
``zico-test: fault at <time.monotonic()>`` to stderr: a time before its process exits, on the clock the test
reads too (``CLOCK_MONOTONIC`` is the machine's), from which the test times how soon its chunks are back.

``cuda-illegal-address`` (a job on a CUDA device) makes its CUDA context unusable for good: a kernel that stores to
address 0x10, written in PTX and launched through the CUDA driver API with ctypes (no compiler needed: the driver
compiles PTX), faults with an illegal memory access (CUDA_ERROR_ILLEGAL_ADDRESS, 700), a *sticky* error: every
later CUDA call of the process fails, and the job ends failed with torch's error at its next use of the device.

``greedy`` is a neighbour that never frees: it allocates 12 MiB tensors through torch (so from the agent's chunks)
and keeps them, and after every out-of-memory error it tries again, until SIGTERM; then it frees everything and
ends ``cancelled``.
"""
import ctypes
import json
import os
import signal
import sys
import threading
import time

from workers import jobproc
from zico_workloads import training

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


def strike(kind: str, spec: dict) -> None:
    import torch
    import zico_allocator as za

    budget = int(spec.get("test_budget_bytes") or 256 << 20)
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
            x = torch.ones(2 * budget // 4, dtype=torch.float32)
            time.sleep(3600)
            del x
    elif kind == "greedy":
        greedy(torch)
    elif kind == "cuda-illegal-address":
        stamp()
        illegal_address(torch, spec["device"])
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
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    held, refusals = [], 0
    while not stop.is_set():
        try:
            held.append(torch.ones(GREEDY_STEP_BYTES // 4, dtype=torch.float32))
        except torch.OutOfMemoryError:
            refusals += 1  # and again: a greedy job does not take no for an answer
    sys.stderr.write(f"greedy: held {len(held) * GREEDY_STEP_BYTES} bytes, refused {refusals} times\n")
    held.clear()
    raise jobproc.Stopped("cancelled")


def main() -> int:
    spec = json.loads(sys.argv[sys.argv.index("--spec") + 1])
    kind = os.environ.get(f"ZICO_TEST_FAULT_{spec['job']}")
    if kind:
        original = training.TrainingJob.run_iteration

        def run_iteration(self, i, marks=None):
            if i == FAULT_AT:
                marks.iteration_start(i)
                marks.phase("forward")
                strike(kind, spec)
            return original(self, i, marks)

        training.TrainingJob.run_iteration = run_iteration
    return jobproc.main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
