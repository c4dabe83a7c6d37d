"""A real job process (``workers.jobproc``) with a fault injected at one iteration, for the agent's crash tests.

Run as ``python -m faulty_job --spec ...`` (this folder on PYTHONPATH) by a DeviceAgent whose
``job_module`` is ``faulty_job``. The spec's ``params`` go to the workload as usual; the fault is read from
the environment of the agent's process: ``ZICO_TEST_FAULT_<job id>=<kind>`` with ``kind`` one of segfault,
exit3, exception, hang, malloc, escape-budget, escape-scope, escape-bind, greedy; it strikes inside iteration 2 (forward
pass), after the job has held pool memory for two iterations. A job without a fault trains normally. Where the job
itself ends (segfault, exit3, exception, escape-budget's out-of-memory error) it first writes
``zico-test: fault at <time.monotonic()>`` to stderr: a time before its process exits, on the clock the test
reads too (``CLOCK_MONOTONIC`` is the machine's), from which the test times how soon its chunks are back.

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
    elif kind == "escape-scope":  # route torch around the allocator, then allocate 2x the budget
        za.set_cpu_scope("off")
        x = torch.ones(2 * budget // 4, dtype=torch.float32)
        time.sleep(3600)
        del x


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
