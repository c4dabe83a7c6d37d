"""The crash-isolation tests' harness (tests/workers/test_job_processes.py on CPU, test_gpu_crash_isolation.py on a
GPU): a device agent that paces one job, and a watch that times how soon a dead job's chunks are back.

Neither changes what the agent does about a fault: :class:`PacedAgent` only holds an iteration before its gate, as
a time shift would, and notes when the agent kills a job; :class:`ExitWatch` only reads the pool.
"""
from __future__ import annotations

import os
import select
import threading
import time
from typing import Callable

from workers.agent import DeviceAgent, JobRun


class PacedAgent(DeviceAgent):
    """A device agent that holds a job's iteration before its gate while ``hold(job_id, iteration)`` is true
    (checked every 20 ms, at most ``hold_limit_s``): the job waits for ``go`` as it waits out a time shift, and is
    waiting, not hung, for the watchdog. ``kills``: job id -> monotonic seconds of the agent's first SIGKILL of
    it (taken before the signal is sent)."""

    def __init__(self, *args, hold: Callable[[int, int], bool], hold_limit_s: float = 600.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.hold, self.hold_limit_s = hold, hold_limit_s
        self.kills: dict[int, float] = {}

    def _begin(self, run, proc, iteration: int) -> None:
        run.in_gate = True
        deadline = time.monotonic() + self.hold_limit_s
        while self.hold(run.job_id, iteration) and time.monotonic() < deadline:
            time.sleep(0.02)
        super()._begin(run, proc, iteration)

    def _kill(self, run, proc, reason: str) -> None:
        self.kills.setdefault(run.job_id, time.monotonic())
        super()._kill(run, proc, reason)


class ExitWatch:
    """For each job process: when it was seen to have exited (its pidfd turned readable, at or after the exit:
    ``exited``) and when the agent pool next showed it holding nothing (at or after its chunks came back:
    ``back``), with what it held when the exit was seen (``held_at_exit``), all monotonic seconds and bytes.
    Call :meth:`on_hello` from the job's ``hello`` message: the pidfd is opened then, while the process lives.
    Needs the agent pool (``agent.pool.native``) and Linux >= 5.3 (``os.pidfd_open``)."""

    def __init__(self, agent: DeviceAgent, runs: dict[int, JobRun], limit_s: float = 10.0):
        self.agent, self.runs, self.limit_s = agent, runs, limit_s
        self.exited: dict[int, float] = {}
        self.held_at_exit: dict[int, int] = {}
        self.back: dict[int, float] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def held(self, job_id: int) -> int:
        """Bytes the agent pool counts as held by ``job_id`` now."""
        return self.agent.pool.native.stats()["jobs"][job_id]["held_bytes"]

    def on_hello(self, job_id: int) -> None:
        fd = os.pidfd_open(self.runs[job_id].pid)
        t = threading.Thread(target=self._watch, args=(job_id, fd), name=f"exit-watch-{job_id}", daemon=True)
        self._threads.append(t)
        t.start()

    def _watch(self, job_id: int, fd: int) -> None:
        try:
            while not select.select([fd], [], [], 0.5)[0]:
                if self._stop.is_set():
                    return
            exited = time.monotonic()
            held = self.held(job_id)
            self.held_at_exit[job_id] = held
            while held and time.monotonic() - exited < self.limit_s and not self._stop.is_set():
                time.sleep(0.002)
                held = self.held(job_id)
            self.exited[job_id] = exited
            if held == 0:
                self.back[job_id] = time.monotonic()
        finally:
            os.close(fd)

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(15)
