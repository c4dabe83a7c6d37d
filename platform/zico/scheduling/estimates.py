"""Background CPU estimates for the scheduler service: a catalog job sent to profiling without a stored estimate
gets one, computed in a child process beside the rounds, so a job that fits no device is failed before its
profile ends and identical submissions are refused at once (Note [Known memory needs] in zico.jobs.known).

Note [Estimates beside the rounds]
    A round must stay well under a second (docs/placement.md) and a cold estimate takes 5-10 s of CPU
    (torch, fake tensors; zico.jobs.known), so it never runs in a round: :class:`BackgroundEstimates` runs
    ``manage.py curve estimate <workload> --params-json <params> --device cuda:0`` in a child process,
    one at a time, and the round only polls it (no wait). The child stores the curve in the estimate
    cache (``ZICO_ESTIMATE_CACHE_DIR``); when it ends, the round judges the jobs that asked for it
    against the device budgets and fails a misfit still queued or profiling (asking a profiling run's
    worker to stop). The job is profiled meanwhile, so a job that fits loses nothing; a child nobody
    needs any more (its jobs profiled or gone) is stopped, one past ``ZICO_ESTIMATE_TIME_LIMIT_S`` is
    killed, and a failed one is not retried by the same process. ``runscheduler`` owns one unless
    ``ZICO_SCHEDULER_ESTIMATES`` is off (a scheduler image without torch). Estimates users ask for through the API
    run in the same queue (Note [Estimates users ask for] in zico.scheduling.estimate_requests).
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from zico.jobs.known import ESTIMATE_DEVICE, params_key

log = logging.getLogger(__name__)


@dataclass
class _Wanted:
    workload: str
    params: dict[str, Any]
    job_ids: set[int] = field(default_factory=set)
    asked: bool = False        # a user asked for it through the API (zico.scheduling.estimate_requests)
    error: str | None = None   # why it failed, once it has


class BackgroundEstimates:
    """CPU estimates run one at a time in a child process (Note [Estimates beside the rounds]).

    Args:
        time_limit_s: seconds a child may run before it is killed.
        argv: the command for one estimate, given ``(workload, params JSON)``; the default is
            ``manage.py curve estimate``.
    """

    def __init__(self, time_limit_s: float, argv=None) -> None:
        self.time_limit_s = float(time_limit_s)
        self.argv = argv or _curve_estimate_argv
        self.pending: dict[tuple[str, str], _Wanted] = {}  # in order of the first request
        self.running: tuple[tuple[str, str], _Wanted, subprocess.Popen, float, Any] | None = None
        self.tried: set[tuple[str, str]] = set()  # ended (stored or failed) in this process
        self.failures: dict[tuple[str, str], str] = {}  # of those, the failed ones: why
        self.answered: list[_Wanted] = []  # ended estimates users asked for, until the scheduler takes them

    def want(self, workload: str, params: dict[str, Any], job_id: int | None) -> None:
        """Ask for the estimate of ``workload`` with ``params`` on behalf of job ``job_id``, or (None) of a user who
        asked through the API: such a one runs even when no job waits for it, and lands in ``answered`` when it
        ends; one that failed in this process is answered at once with its error, one that was stored and is
        asked for again (its cache entry since removed) runs again."""
        key = params_key(workload, params)
        if key in self.tried:
            if job_id is not None:
                return
            if key in self.failures:
                self.answered.append(_Wanted(workload, params, asked=True, error=self.failures[key]))
                return
            self.tried.discard(key)
        if self.running is not None and self.running[0] == key:
            wanted = self.running[1]
        else:
            wanted = self.pending.setdefault(key, _Wanted(workload, params))
        if job_id is None:
            wanted.asked = True
        else:
            wanted.job_ids.add(job_id)

    def step(self, still_needed) -> list[_Wanted]:
        """Poll the running child, start the next one; never waits. ``still_needed(job_ids) -> bool`` says
        whether any of those jobs still waits for its curve. Returns the estimates stored since the last step."""
        done: list[_Wanted] = []
        if self.running is not None:
            key, wanted, proc, started, err = self.running
            rc = proc.poll()
            if rc is not None:
                self.running = None
                self.tried.add(key)
                if rc == 0:
                    done.append(wanted)
                else:
                    err.seek(0)
                    tail = err.read().decode(errors="replace").strip().splitlines()[-1:] or [""]
                    log.warning("estimate of %s %s failed (exit %s: %s); its jobs are profiled", wanted.workload,
                                wanted.params, rc, tail[0][:300])
                    wanted.error = f"the estimate failed (exit status {rc}): {tail[0][:500]}"
                err.close()
                self._answer(key, wanted)
            elif time.monotonic() - started > self.time_limit_s:
                log.warning("estimate of %s %s killed after %.0f s (ZICO_ESTIMATE_TIME_LIMIT_S)", wanted.workload,
                            wanted.params, self.time_limit_s)
                self._stop(proc, err)
                self.running = None
                self.tried.add(key)
                wanted.error = f"the estimate took longer than {self.time_limit_s:g} s (ZICO_ESTIMATE_TIME_LIMIT_S)"
                self._answer(key, wanted)
            elif not wanted.asked and not still_needed(wanted.job_ids):
                log.info("estimate of %s %s stopped: no job waits for it", wanted.workload, wanted.params)
                self._stop(proc, err)
                self.running = None
        while self.running is None and self.pending:
            key = next(iter(self.pending))
            wanted = self.pending.pop(key)
            if not wanted.asked and not still_needed(wanted.job_ids):
                continue
            argv = self.argv(wanted.workload, json.dumps(wanted.params))
            err = tempfile.TemporaryFile()  # a file, not a pipe: an unread pipe could fill and stall the child
            env = {**os.environ, "ZICO_ESTIMATE_CACHE_DIR": str(settings.ZICO_ESTIMATE_CACHE_DIR)}  # where we read
            proc = subprocess.Popen(argv, cwd=settings.BASE_DIR, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=err)
            self.running = (key, wanted, proc, time.monotonic(), err)
            log.info("estimating %s %s for jobs %s (pid %s)", wanted.workload, wanted.params,
                     sorted(wanted.job_ids), proc.pid)
        return done

    def _answer(self, key: tuple[str, str], wanted: _Wanted) -> None:
        """Record how an ended estimate went; one a user asked for goes to ``answered``."""
        if wanted.error is not None:
            self.failures[key] = wanted.error
        if wanted.asked:
            self.answered.append(wanted)

    def take_answered(self) -> list[_Wanted]:
        """The ended estimates users asked for since the last call (each with ``error`` None when stored)."""
        out, self.answered = self.answered, []
        return out

    @staticmethod
    def _stop(proc: subprocess.Popen, err) -> None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        err.close()

    def close(self) -> None:
        """Stop the running child, if any."""
        if self.running is not None:
            self._stop(self.running[2], self.running[4])
            self.running = None


def _curve_estimate_argv(workload: str, params_json: str) -> list[str]:
    return [sys.executable, str(settings.BASE_DIR / "manage.py"), "curve", "estimate", workload,
            "--params-json", params_json, "--device", ESTIMATE_DEVICE]
