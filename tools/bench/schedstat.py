"""CPU time and run-queue wait of threads and processes, read from Linux's ``schedstat`` files (nanoseconds).

``/proc/<pid>/task/<tid>/schedstat`` holds three numbers: time on a CPU (ns), time waiting on a run queue for a
CPU (ns), and time slices run. On a loaded machine a step's wall time is its time on a CPU, plus its wait for a
CPU (the load), plus the time it was blocked (a gate round trip, I/O): the benchmark reports the wait apart so
that what a step costs can be told from what the machine's other work cost it.
"""
from __future__ import annotations

import os
import time


def thread_ns(pid: int | str = "self", tid: int | None = None) -> tuple[int, int] | None:
    """``(on_cpu_ns, run_queue_wait_ns)`` of thread ``tid`` of ``pid`` (default: its main thread); None when gone."""
    path = f"/proc/{pid}/schedstat" if tid is None else f"/proc/{pid}/task/{tid}/schedstat"
    try:
        with open(path) as f:
            run, wait, _ = f.read().split()
        return int(run), int(wait)
    except (OSError, ValueError):
        return None


def current_thread_ns() -> tuple[int, int]:
    """``(on_cpu_ns, run_queue_wait_ns)`` of the calling thread."""
    with open("/proc/thread-self/schedstat") as f:
        run, wait, _ = f.read().split()
    return int(run), int(wait)


def process_cpu_ns(pid: int | str = "self") -> int | None:
    """Time on a CPU (ns) of process ``pid``; None when the process is gone.

    For this process it is ``time.process_time_ns()`` (CLOCK_PROCESS_CPUTIME_ID), which keeps the time of
    threads that have already ended; for another process, the sum over its live threads' ``schedstat`` (a
    thread that ends between two readings takes its time with it, so a difference of two readings can
    undercount: keep threads alive across a measured interval, as the job processes do).
    """
    if pid == "self" or pid == os.getpid():
        return time.process_time_ns()
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    total = 0
    for tid in tids:
        got = thread_ns(pid, int(tid))
        if got is not None:
            total += got[0]
    return total
