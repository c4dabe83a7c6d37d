"""The device agent: holds the device's pool and coordinator, runs each job as its own process, watches it.

:meth:`DeviceAgent.run` launches one job (:class:`workers.agent.launch.JobProcess`) and blocks its caller
until the process has ended, returning the outcome. Meanwhile, in the job's reader thread, every
``iteration_begin`` goes through the coordinator's gate (:class:`workers.gate.Gate`, called as the job
threads called it) and is answered ``go`` when the gate lets it start; marks feed the gate; ``stats`` update
the job's live figures (read by the reporter). The calling thread supervises, four times a second:

* a stop request (``stop_check()`` -> ``"cancelled"`` / ``"aborted"``): ``stop`` message and SIGTERM, SIGKILL
  after ``stop_grace_s``;
* the hang watchdog: no progress message for ``hang_timeout_s`` outside a gate wait -> SIGKILL, failed;
* the wall-clock limit (``JobRun.wall_limit``): run past it since launch -> ``stop`` message and SIGTERM,
  SIGKILL after ``stop_grace_s``, failed ("ran past its wall-clock limit of 1 h 0 min (the tenant's limit):
  stopped", Note [A job's wall-clock limit]);
* bypass detection: the job's ``RssAnon`` above its baseline, allowed share and ``bypass_margin_bytes`` ->
  SIGKILL, failed ("used 353.11 MiB of memory outside Zico's allocator (...), over the 128.00 MiB allowed:
  stopped", Note [Memory outside the allocator]; the figures behind it in the log).

The agent's compute meter (``meter``, :class:`placement.compute_meter.ComputeMeter`) sees every job's ``go`` and
iteration end, and each job process's CPU time while it computes alone (CPU device; on a GPU the reporter feeds
it NVML ``utilization.gpu``); a run's measured compute share goes into its metrics as ``compute_share``
(zico_contracts.computeshare; Note [Measured compute share] in placement.compute_share).

A spec with ``"kind": "script"`` is a user's own training script (:mod:`zico_contracts.userjob`): it runs as
``settings.script_module`` inside its sandbox (:mod:`.sandbox`), never unsandboxed; where no sandbox can run
(:meth:`DeviceAgent.user_code_refusal`) or the spec is malformed, :meth:`DeviceAgent.run` returns ``failed``
with that message and starts nothing. A catalog job is a script too, the built-in project
``workers/job/catalog_project`` (``workers.runner.catalog_script_spec``), which where no sandbox can run goes
the same way unwrapped (Note [No sandbox for Zico's own code] in :mod:`.sandbox`); the tools that measure Zico run
catalog jobs so too (``tools.jobpath``).

Note [Outcome of a job process]
    The job's own ``done`` message gives the status, unless the agent killed it (hang, bypass: ``failed``
    with the agent's reason; a stop: the stop's status). A process that ends without ``done`` failed:
    "killed by signal SIGSEGV (train.py, line 13) before reporting an outcome", or, at a limit of its
    sandbox, "stopped by the CPU time limit of 8 s (ZICO_JOB_CPU_S): killed by signal SIGXCPU ...". A failed
    job's reason is its headline first (the job's own reason, the agent's, or the crash), then how the
    process ended ("exited with code 1", "killed by signal SIGKILL") and the last lines of its stderr
    (:func:`failure_reason`; pages and ``zico status`` show the headline first, the rest below it). Its pool
    registration is removed as soon as the exit is seen, so every chunk it held is back within a
    supervision tick. Its metrics are the job process's, less the names only the worker side measures
    (``zico_contracts.jobmetrics.WORKER_METRICS``: a job cannot forge its compute share or gate delays), plus
    the agent's own figures; the peaks are the larger of the agent's and the job's.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable

from placement.compute_meter import ComputeMeter
from zico_contracts import computeshare, cpushare, jobbudget, jobmetrics, keys, userjob, walltime
from zico_contracts.oom import format_bytes

from ..gate import Gate, RunStopped
from ..joblines import neutral_paths
from . import diskwatch, sandbox, shmwatch
from .launch import LIMIT_SIGNALS, JobProcess, crash_site, describe_exit, exit_signal, process_cpu_s
from .pool import Pool
from .slots import CpuSlots
from .settings import AgentSettings, device_bypass_margin

log = logging.getLogger(__name__)

TICK_S = 0.25
STOP_CHECK_S = 0.5
SUPERSEDED = "superseded"  # stop status of a profile run that the job's run replaced (supersede_profile)
STOP_REASONS = {"cancelled": "cancelled on request", SUPERSEDED: "superseded by the job's run (a stale profile)"}
PROGRESS_MESSAGES = ("hello", "ready", "iteration_begin", "iteration_end", "mark", "metric", "profiled", "done")


@dataclass
class JobRun:
    """One job process under the agent, with its live figures (bytes) as the job last reported them.

    ``spec``: a script job's (``"kind": "script"``, :func:`zico_contracts.userjob.validate_spec`): a user's own
    script or the catalog project (``workers.runner.catalog_script_spec``). ``on_message(msg)`` sees every message of the job (and the
    agent's ``go``), in the job's reader thread; ``on_output(stream, line)`` every line the job prints,
    ``stream`` ``"stdout"`` or ``"stderr"`` (and the agent's own notes, such as a CPU slot's share, as
    ``"system"``, a stream no job can write), each cut to ``AgentSettings.output_line_bytes``, in that stream's
    drain thread (a slow callback holds the job up once its pipe is full). ``pid`` is the process the agent
    launched (a sandbox's outer bwrap), ``job_pid`` the job's own (from its ``hello``)."""

    job_id: int
    spec: dict[str, Any]
    curve: dict[str, Any] | None = None
    placement: int | None = None
    stop_check: Callable[[], str | None] = lambda: None
    on_message: Callable[[dict[str, Any]], None] = lambda msg: None
    tenant_id: int = 0
    budget_bytes: int | None = None  # the job's own budget, held by the pool (Note [A job's own budget]); None: none
    budget_default: bool = False  # budget_bytes is a script's default bound, lifted at its curve (zico_contracts.jobbudget)
    budget_refusals: int | None = None  # allocations the pool refused for budget_bytes, at its end (None: per-process)
    on_output: Callable[[str, str], None] = lambda stream, line: None
    profiling: bool = False  # a profile run (workers.profiling): reported with phase "profiling"
    next_curve: dict[str, Any] | None = None  # a curve measured mid-run, gated from the next iteration on
    compute_share: dict[str, Any] | None = None  # the run's measured share (zico_contracts.computeshare), at its end
    cpu_share: dict[str, Any] | None = None  # its slot's cores and threads (zico_contracts.cpushare), CPU only
    wall_limit: walltime.WallLimit | None = None  # Note [A job's wall-clock limit]; None: none
    # live state
    pid: int | None = None
    job_pid: int | None = None
    iteration: int = -1
    iterations: int = 0
    phase: str = "setup"
    allocated: int = 0
    reserved: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    held_peak: int | None = None  # the agent pool's peak grant to the job, at its end (None: per-process pools)
    began: int = 0  # iterations the agent let start (a go sent): Note [A profile is what the agent measured]
    delay_s: float = 0.0
    delays: int = 0
    gate: Any = None
    done: dict[str, Any] | None = None
    killed_reason: str | None = None
    stop_status: str | None = None
    peak_rss_anon: int = 0
    peak_shared: int = 0  # Note [Shared memory of a job] in workers.agent.shmwatch
    baseline_shared: int = 0
    peak_disk: int = 0  # bytes its output and scratch directories held, at most (Note [A job's disk])
    baseline_rss_anon: int | None = None
    baseline_device_used: int | None = None  # CUDA: NVML used memory of the process at ``ready`` (its context)
    ready: bool = False
    started_at: float = field(default_factory=time.time)
    launched_at: float | None = None  # time.monotonic() when its process was started
    last_progress: float = field(default_factory=time.monotonic)
    in_gate: bool = False
    # Note [Slowdown beside neighbours]: start-to-start seconds of its iterations that began and ended beside a
    # neighbour on its coordinator, and how many; the last go's time and whether it had a neighbour then
    beside_s: float = 0.0
    beside_iterations: int = 0
    last_go: float | None = None
    last_go_beside: bool = False
    yielding: str = ""  # "gated" (held at its gate), "yielding" (through its iteration) or "": Note [Yielding
    #                     through the iteration]; its cache may serve its neighbours while not ""


class DeviceAgent:
    """The one agent of a device. ``device`` is ``"cpu"`` or ``"cuda:N"``; bytes throughout.

    Args:
        capacity_bytes: the pool's capacity (CPU; GPUs: the device memory).
        budget_bytes: the device budget (bytes); the gate plans with ``coordinator``'s own share of it.
        coordinator: the device's ``placement.coordinator.Coordinator`` (None: jobs run ungated).
        settings: timeouts and margins (:class:`AgentSettings`).
        slots: CPU: the most jobs that may share the device; each job then gets its slot's share of the cores
            (:mod:`.slots`), reported as ``cpu_share`` in its metrics. None: jobs get torch's defaults.
    """

    def __init__(self, device: str, capacity_bytes: int | None, budget_bytes: int, coordinator=None,
                 settings: AgentSettings | None = None, slots: int | None = None):
        self.device = device
        # CPU: each job gets its slot's cores and threads (Note [Compute per slot] in zico_contracts.cpushare)
        self.cpu_slots = CpuSlots(slots) if slots is not None and device == "cpu" else None
        self.settings = settings or AgentSettings.from_env()
        self.pool = Pool(device, capacity_bytes, budget_bytes)
        self.capacity_bytes = capacity_bytes
        self.coordinator = coordinator
        # CPU: a job's utilisation is its CPU seconds over wall seconds x the cores the worker (so its jobs) may use
        self.meter = ComputeMeter(time.monotonic, cores=len(os.sched_getaffinity(0)) if device == "cpu" else 1)
        self._runs: dict[int, JobRun] = {}
        self._lock = threading.Lock()
        self._ended = threading.Condition(self._lock)  # notified whenever a run leaves ``_runs``

    @property
    def budget_bytes(self) -> int:
        return self.pool.budget_bytes

    def jobs(self) -> list[JobRun]:
        with self._lock:
            return list(self._runs.values())

    def set_budget(self, budget_bytes: int) -> None:
        """The device budget (bytes) for the pool; the caller re-plans the coordinator."""
        self.pool.set_budget(budget_bytes)

    def supersede_profile(self, job_id: int, timeout_s: float) -> bool:
        """Stop job ``job_id``'s profile run here, if one runs, and wait until it has ended (Note [A stale
        profile run] in workers.profiling). Returns True when no run of the job is here any more (none was, or the
        profile ended within ``timeout_s`` seconds); False when a run (not a profile) is here, or the profile
        outlived the wait."""
        with self._ended:
            run = self._runs.get(job_id)
            if run is not None and run.profiling:
                log.info("job %s: its profile run is superseded by its run", job_id)
                run.stop_status = run.stop_status or SUPERSEDED
            elif run is not None:
                return False
            return self._ended.wait_for(lambda: job_id not in self._runs, timeout=timeout_s)

    def user_code_refusal(self) -> str | None:
        """Why this agent cannot run user scripts (no bubblewrap, no namespaces), or None when it can."""
        return sandbox.refusal(self.settings.bwrap)

    def close(self) -> None:
        for run in self.jobs():
            run.stop_status = run.stop_status or "aborted"
        self.pool.close()

    # -- one job -------------------------------------------------------------------------------------
    def run(self, run: JobRun) -> dict[str, Any]:
        """Launch ``run`` and block until its process ended. Returns ``{status, reason, metrics, pid}``.

        Raises RuntimeError when the job already runs here, CurveError for a malformed curve (nothing started).
        A user script whose spec is malformed or that cannot be sandboxed here returns ``failed`` with the
        reason, ``pid`` None (nothing started).
        """
        gate = run.gate = self._gate(run, run.curve)
        with self._lock:
            if run.job_id in self._runs:
                raise RuntimeError(f"job {run.job_id} is already running on {self.device}")
            self._runs[run.job_id] = run
        agent_fd = None
        try:
            spec = {**run.spec, "job": run.job_id}
            if not self.pool.shared:  # Note: per-process pools, each bounded by the device budget (and the job's)
                spec.setdefault("budget_bytes", min(self.pool.budget_bytes, run.budget_bytes or self.pool.budget_bytes))
                spec.setdefault("capacity_bytes", self.capacity_bytes)
            try:  # every job is a script for the job process entry, a catalog job the catalog project's
                box = sandbox.Sandbox.for_job(run.job_id, spec,  # its /dev/shm is at most the margin
                                              dataclasses.replace(self.settings, bypass_margin_bytes=self.bypass_margin()))
            except (userjob.SpecError, sandbox.SandboxUnavailable) as exc:
                self._forget(run.job_id)
                log.warning("job %s: not started: %s", run.job_id, exc)
                return {"status": "failed", "reason": str(exc), "pid": None, "returncode": None, "metrics": {}}
            spec = box.spec
            share_env = self._cpu_share(run, spec)
            agent_fd = self.pool.add_job(run.job_id, run.tenant_id, run.budget_bytes)
            self.pool.set_job_plan(run.job_id, gate.curve.peak_bytes if gate.curve is not None else None)
            proc = JobProcess(run.job_id, box, self.settings.script_module,
                              lambda msg: self._on_message(run, proc, msg),
                              lambda exc: self._kill(run, proc, f"protocol error: {exc}"),
                              agent_fd, self.settings.stderr_lines,
                              on_output=lambda stream, line: self._on_output(run, stream, line),
                              output_line_bytes=self.settings.output_line_bytes, share_env=share_env,
                              output_lines_per_s=self.settings.output_lines_per_s)
        except BaseException:
            self._forget(run.job_id)
            self.pool.remove_job(run.job_id)
            raise
        run.pid = proc.pid
        gate.join(run.job_id)
        cpu = (lambda: process_cpu_s(run.job_pid)) if self.device == "cpu" else None
        self.meter.join(run.job_id, run.curve, cpu, continuous=run.profiling)
        run.launched_at = time.monotonic()
        proc.start()
        try:
            returncode = self._supervise(run, proc)
        finally:
            run.held_peak = self.pool.peak_held_bytes(run.job_id)
            run.budget_refusals = self.pool.job_budget_refusals(run.job_id)
            self.pool.remove_job(run.job_id)  # Note [Outcome of a job process]: its chunks are back now
            run.gate.leave(run.job_id)
            self._measured(run)
            self._forget(run.job_id)
        proc.finish()
        return self._outcome(run, proc, returncode)

    def _cpu_share(self, run: JobRun, spec: dict[str, Any]) -> dict[str, str] | None:
        """Take a slot for ``run`` (CPU device with slots): its share goes in ``run.cpu_share`` and a line in its
        log; returns the environment that hands it over (None without slots)."""
        if self.cpu_slots is None:
            return None
        env, share = cpushare.job_environment(self.cpu_slots.take(run.job_id), spec.get("env"))
        run.cpu_share = share.to_dict()
        run.on_output("system", f"this job's share of the CPU device: "
                                f"{cpushare.describe(run.cpu_share, spec.get('env'))}")
        return env

    def _forget(self, job_id: int) -> None:
        if self.cpu_slots is not None:
            self.cpu_slots.free(job_id)
        with self._ended:
            self._runs.pop(job_id, None)
            self._ended.notify_all()

    def _measured(self, run: JobRun) -> None:
        """The run's compute share from the meter (None when it showed too little), checked against the wire
        contract before it is sent: a bug here must not put a malformed object in the job's metrics."""
        estimate = self.meter.leave(run.job_id)
        if estimate is None:
            return
        try:
            run.compute_share = computeshare.validate({**estimate.to_dict(), "device": self.device})
        except computeshare.ShareError as exc:
            log.warning("job %s: compute share measurement dropped: %s", run.job_id, exc)

    def _gate(self, run: JobRun, curve: dict[str, Any] | None) -> Gate:
        """``run``'s gate on this device's coordinator (not gated while ``curve`` is None). Raises CurveError."""
        return Gate(SimpleNamespace(coordinator=self.coordinator,
                                    link=SimpleNamespace(stop_requested=lambda _j, _p: run.stop_check())),
                    SimpleNamespace(job=run.job_id, placement=run.placement, curve=curve))

    def set_curve(self, job_id: int, curve: dict[str, Any]) -> None:
        """Gate a job that started without a curve (a script job profiled as its run starts: Note [A script's
        profile is the start of its run] in workers.runner) with ``curve`` from its next iteration start on: it
        joins the coordinator as a new job does (its first iteration there held at its peak, Note [Warm-up
        iteration] in workers.gate). A job held to a default bound while it was profiled (``JobRun.budget_default``,
        zico_contracts.jobbudget) has it lifted now: from here on its curve is what plans and gates it, as for any
        job of known memory. Raises CurveError for a malformed curve, KeyError when the job is not here."""
        from placement.curves import curve_from_dict

        curve_from_dict(curve)  # raises CurveError naming the bad field, before anything changes
        with self._lock:
            run = self._runs[job_id]
            run.next_curve = curve
            lift = run.budget_default and run.budget_bytes is not None
            if lift:
                run.budget_bytes, run.budget_default = None, False
        if lift:
            self.pool.set_job_budget(job_id, None)
            run.on_output("system", "memory curve stored: the default bound is lifted, the curve gates the job")

    def _supervise(self, run: JobRun, proc: JobProcess) -> int:
        s = self.settings
        next_stop_check = next_rss = next_disk = 0.0
        disk_roots = [d for d in (run.spec.get("output_dir"), run.spec.get("scratch_dir")) if d]
        kill_at = None
        wall_kill_at = None  # SIGKILL then, once the wall-clock limit's SIGTERM was sent
        while True:
            rc = proc.wait(TICK_S)
            if rc is not None:
                return rc
            now = time.monotonic()
            if wall_kill_at is None:
                wall_kill_at = self._check_wall_limit(run, proc, now)
            elif now >= wall_kill_at:
                proc.signal(signal.SIGKILL)
            if run.stop_status is None and now >= next_stop_check:
                next_stop_check = now + STOP_CHECK_S
                stop = run.stop_check()
                if stop:
                    run.stop_status = stop
            if run.stop_status is not None and kill_at is None:
                log.info("job %s: stopping (%s)", run.job_id, run.stop_status)
                proc.send("stop", reason=run.stop_status)
                proc.signal(signal.SIGTERM)
                kill_at = now + s.stop_grace_s
            if kill_at is not None and now >= kill_at and run.killed_reason is None:
                run.killed_reason = f"{run.stop_status}: no exit within {s.stop_grace_s:g} s of SIGTERM, killed"
                proc.signal(signal.SIGKILL)
            timeout, name = ((s.hang_timeout_s, "ZICO_JOB_HANG_TIMEOUT_S") if run.ready else
                             (s.startup_timeout_s, "ZICO_JOB_STARTUP_TIMEOUT_S"))
            if not run.in_gate and run.done is None and now - run.last_progress > timeout:
                self._kill(run, proc, f"hung: no progress message for {timeout:g} s"
                                      f"{'' if run.ready else ' before it was ready'} (timeout {name})")
            if now >= next_rss:
                next_rss = now + s.rss_interval_s
                self._check_bypass(run, proc)
                self._check_device_bypass(run, proc)
            if disk_roots and now >= next_disk:
                next_disk = now + max(s.disk_interval_s, 10 * self._check_disk(run, proc, disk_roots))

    def _check_wall_limit(self, run: JobRun, proc: JobProcess, now: float) -> float | None:
        """Note [A job's wall-clock limit]
            A job's hard wall-clock limit (``JobRun.wall_limit``, the run spec's ``wall_limit``: the least of the
            job's own request, its tenant's maximum and ``ZICO_JOB_TIME_LIMIT_S``, resolved on the web side by
            zico_contracts.walltime.resolve) counts from the launch of its process (``JobRun.launched_at``): the
            code fetch and an environment build before it do not count, and neither does a wait for a device.
            Time the job spends held at its memory gate does count: a job held there still holds its device
            slot, and the coordinator's delays are bounded by the plan's slowdown (``ZICO_MAX_SLOWDOWN``), which
            a limit should leave room for. Past it the job is stopped as a cancel stops it (a ``stop`` message
            and SIGTERM, SIGKILL after ``stop_grace_s``) and fails with :func:`zico_contracts.walltime.reason`
            ("ran past its wall-clock limit of 1 h 0 min (the tenant's limit): stopped"), whatever its own
            ``done`` says. The clock is the agent's, in the worker: nothing the job prints, reports or sleeps
            through moves it (the hang watchdog looks at progress; this does not). The soft
            ``time_limit_s`` of a profile stays the job process's own iteration-boundary stop.

        Stop ``run`` when it has run past its limit; returns when to SIGKILL it (monotonic seconds), else None."""
        limit = run.wall_limit
        if (limit is None or run.launched_at is None or now - run.launched_at < limit.seconds
                or run.stop_status is not None or run.killed_reason is not None):
            return None
        run.killed_reason = walltime.reason(limit)
        log.warning("job %s (pid %s) stopped after %.1f s: %s", run.job_id, proc.pid, now - run.launched_at,
                    run.killed_reason)
        proc.send("stop", reason="time_limit")
        proc.signal(signal.SIGTERM)
        return now + self.settings.stop_grace_s

    def _check_disk(self, run: JobRun, proc: JobProcess, roots: list[str]) -> float:
        """Note [A job's disk] in workers.agent.diskwatch: stop ``run`` when its writable directories hold more
        than ``AgentSettings.disk_bytes``. Returns the seconds the measurement took."""
        t0 = time.monotonic()
        limit = self.settings.job_disk_bytes
        used = diskwatch.used_bytes(roots, stop_above=limit)
        run.peak_disk = max(run.peak_disk, used)
        if used > limit and run.killed_reason is None:
            self._kill(run, proc, f"wrote more than {format_bytes(limit)} to its output and scratch directories "
                                  f"(/tmp included), over the disk limit of a job "
                                  f"(ZICO_JOB_DISK_BYTES): stopped")
        return time.monotonic() - t0

    def _check_bypass(self, run: JobRun, proc: JobProcess) -> None:
        """Note [Memory outside the allocator]
            A job's chunks from the agent pool are shared memory (memfd), not anonymous memory; what a job
            allocates around the allocator (plain malloc, ctypes, a bytearray, torch with the shim turned off)
            is. So its anonymous memory beyond its baseline (sampled at ``hello``: interpreter, torch, client),
            its allowed share (with per-process pools, whose memory is anonymous: the device budget; with the
            agent pool: 0) and the margin was allocated outside the allocator, and the job is stopped. Every
            process the job started counts (:meth:`JobProcess.anon_bytes`: ``Pss_Anon`` summed, so pages a fork
            shares are counted once): a script that forked until its process limit held ~6 MiB per child, and
            4,096 of them ran a 24 GiB host out of memory (the kernel then killed the device worker) while the job's
            own ``RssAnon`` stayed at its baseline. Shared memory the job holds outside the pool (``mmap(-1, n)``,
            memfds, its ``/dev/shm``: Note [Shared memory of a job] in workers.agent.shmwatch) counts with its
            anonymous memory, under the same bound."""
        rss = proc.anon_bytes()
        shared = proc.shared_bytes(shmwatch.pool_inodes() if self.pool.shared else set())
        if rss is None or shared is None or run.baseline_rss_anon is None:
            return
        run.peak_rss_anon = max(run.peak_rss_anon, rss)
        run.peak_shared = max(run.peak_shared, shared)
        self._stop_over(run, proc, rss + shared, run.baseline_rss_anon + run.baseline_shared, "memory",
                        "plain malloc, shared memory, another library",
                        "anonymous + shared bytes (its processes)", "at hello")

    def _check_device_bypass(self, run: JobRun, proc: JobProcess) -> None:
        """Note [Memory outside the allocator] on a GPU: NVML's per-process used memory
        (``nvmlDeviceGetComputeRunningProcesses``) of the job process beyond what it used at ``ready`` (its
        CUDA context and the model it built through the allocator), its allowed share (with the agent pool the
        chunks are the agent's allocations, imported by the job, so 0; with per-process pools the device
        budget) and the margin was allocated around the allocator (``cudaMalloc``, another library), and the
        job is stopped."""
        if not self.device.startswith("cuda") or run.baseline_device_used is None:
            return
        from ..nvml import gpu_process_used_bytes

        used = (gpu_process_used_bytes(int(self.device.partition(":")[2] or 0)) or {}).get(run.job_pid or proc.pid)
        if used is None:
            return
        self._stop_over(run, proc, used, run.baseline_device_used, "device memory", "cudaMalloc, another library",
                        "NVML used", "at ready")

    def bypass_margin(self) -> int:
        """Bytes a job may hold outside the allocator beyond its baseline and share: ``ZICO_JOB_BYPASS_MARGIN_BYTES``
        when set, else the device's (Note [A bound on memory outside the allocator] in workers.agent.settings)."""
        if self.settings.bypass_margin_bytes is not None:
            return self.settings.bypass_margin_bytes
        return device_bypass_margin(self.pool.budget_bytes)

    def _stop_over(self, run: JobRun, proc: JobProcess, used: int, baseline: int, what: str, how: str,
                   used_name: str, baseline_name: str) -> None:
        """Kill ``run`` when ``used`` (bytes) exceeds ``baseline`` + its allowed share (with per-process pools the
        device budget, with the agent pool 0) + the bypass margin (Note [Memory outside the allocator]). The
        reason is a sentence for the job's user ("used 353.11 MiB of memory outside Zico's allocator (plain
        malloc, another library), over the 128.00 MiB allowed: stopped"); the figures behind it go to the log."""
        share = 0 if self.pool.shared else self.pool.budget_bytes
        margin = self.bypass_margin()
        limit = baseline + share + margin
        if used > limit and run.killed_reason is None:
            log.warning("job %s: %s %d bytes, %d %s; allowed above that: share %d + margin %d "
                        "(ZICO_JOB_BYPASS_MARGIN_BYTES)", run.job_id, used_name, used, baseline, baseline_name, share,
                        margin)
            self._kill(run, proc, f"used {format_bytes(used - baseline)} of {what} outside Zico's allocator ({how}), "
                                  f"over the {format_bytes(limit - baseline)} allowed: stopped")

    def _kill(self, run: JobRun, proc: JobProcess, reason: str) -> None:
        if run.killed_reason is None:
            run.killed_reason = reason
            log.warning("job %s (pid %s) killed: %s", run.job_id, proc.pid, reason)
        proc.signal(signal.SIGKILL)

    def _on_message(self, run: JobRun, proc: JobProcess, msg: dict[str, Any]) -> None:
        kind = msg["type"]
        if kind in PROGRESS_MESSAGES:
            run.last_progress = time.monotonic()
        if kind == "stats":
            run.allocated, run.reserved = msg["allocated"], msg["reserved"]
            run.peak_allocated = max(run.peak_allocated, msg["peak_allocated"])
            run.peak_reserved = max(run.peak_reserved, msg["peak_reserved"])
            run.phase = msg["phase"]
            self.pool.job_stats(run.job_id, msg["allocated"], msg["reserved"])
            if run.gate is not None:
                run.gate.observe(run.job_id, msg["allocated"], run.phase)  # Note [Progress from memory] in placement/pacing.py
            return
        if kind == "hello":
            if msg["job_id"] != run.job_id:
                self._kill(run, proc, f"protocol error: hello from job {msg['job_id']}, expected {run.job_id}")
                return
            if run.job_pid is not None:  # the first hello (sent before any user code) names the job's process
                self._kill(run, proc, "protocol error: a second hello")
                return
            run.job_pid = proc.locate(msg["pid"])
            if run.job_pid is None:
                self._kill(run, proc, f"protocol error: hello from pid {msg['pid']}, no such process in the job")
                return
            run.baseline_rss_anon = proc.anon_bytes()  # Note [Memory outside the allocator]
            run.baseline_shared = proc.shared_bytes(shmwatch.pool_inodes() if self.pool.shared else set()) or 0
        if kind == "ready":
            run.ready = True
            if self.device.startswith("cuda"):  # Note [Memory outside the allocator] on a GPU
                from ..nvml import gpu_process_used_bytes

                run.baseline_device_used = (gpu_process_used_bytes(int(self.device.partition(":")[2] or 0))
                                            or {}).get(run.job_pid or proc.pid, 0)
            run.iterations = msg["iterations"]
            run.iteration = msg["resumed_from"] - 1
            if run.profiling:  # a profile run computes from now on without reporting iterations
                self.meter.start(run.job_id)
        elif kind == "iteration_begin":
            self._begin(run, proc, msg["iteration"])
        elif kind == "mark":
            run.phase = msg["kind"]
            run.gate.progress(run.job_id, msg["kind"], msg["iteration"])
        elif kind == "iteration_end":
            self.meter.end(run.job_id)
            run.phase = "done"
            run.gate.progress(run.job_id, "iteration_end", msg["iteration"])
        elif kind == "done":
            run.done = msg
        elif kind == "profiled":
            msg = self._measured_profile(run, msg)
        elif kind == "metric" and "iterations_total" in msg:
            run.iterations = msg["iterations_total"]
        run.on_message(msg)

    def _measured_profile(self, run: JobRun, msg: dict[str, Any]) -> dict[str, Any]:
        """A script job's ``profiled`` with the agent's figures in place of the job's (the Note below).

        Note [A profile is what the agent measured]
            A script job's profile is its own allocator's trace of its first iterations (Note [A script's profile
            is the start of its run] in workers/runner.py), and everything in the ``profiled`` message and the
            trace file comes from the job's process, which runs the user's code: it can write a trace and send
            ``profiled`` of its own (1e12 iterations, a peak of 1e15 bytes were stored so). So the agent puts
            its own measures in the message: ``peak_reserved`` is what its pool granted the job at most
            (:meth:`Pool.peak_held_bytes`; with per-process pools the job's figure, never above the budget its
            pool is bounded by), ``iterations`` at most the iterations it let start (``JobRun.began``),
            ``profile_s`` at most the time since the process was launched. The runner then refuses a trace that
            claims more than these (:func:`workers.profiletrace.checked_trace_rows`): more allocated bytes than were
            granted, more iterations than were let start, a longer span than the run. A job can still make its
            curve smaller than what it truly uses, but not past what the agent holds it to (its budget and the
            gate, Note [A job's own budget]); it cannot make another job's plan wrong by claiming more.
        """
        held = self.pool.peak_held_bytes(run.job_id)
        if held is None:  # per-process pools: each bounded by the device budget and the job's own
            reported = int(msg.get("peak_reserved") or 0)
            held = min([reported] + [b for b in (self.pool.budget_bytes, run.budget_bytes) if b])
        since = time.monotonic() - (run.launched_at if run.launched_at is not None else time.monotonic())
        return {**msg, "iterations": min(msg["iterations"], run.began), "peak_reserved": held,
                "profile_s": round(min(float(msg["profile_s"]), since), 3)}

    def _on_output(self, run: JobRun, stream: str, line: str) -> None:
        run.last_progress = time.monotonic()  # a job that prints is not hung (a user script may never step)
        run.on_output(stream, line)

    def _mark_yielding(self, run: JobRun, mode: str) -> None:
        """Tell the pool ``mode`` ("gated", "yielding" or "") of ``run``'s job when it changed."""
        if mode != run.yielding:
            self.pool.set_yielding(run.job_id, bool(mode), gated=mode == "gated")
            run.yielding = mode

    def _begin(self, run: JobRun, proc: JobProcess, iteration: int) -> None:
        run.phase = "wait"
        run.in_gate = True
        if run.next_curve is not None and not run.gate.joined:  # between two iterations: none is in flight
            run.curve, run.next_curve = run.next_curve, None
            run.gate = self._gate(run, run.curve)
            self.pool.set_job_plan(run.job_id, run.gate.curve.peak_bytes if run.gate.curve is not None else None)
            run.gate.join(run.job_id)
            self.meter.set_curve(run.job_id, run.curve)
        # Note [Yielding through the iteration]
        #   Beside neighbours on its coordinator, a job's cache may serve the others (Note [Yielding jobs] in
        #   allocator/src/agent_server.cpp): held back at its gate, and also through the iteration that follows,
        #   for the plan counts each job's curve, never its cache. Yielding only at the gate, a job admitted at
        #   once kept the blocks its last iteration freed (tiny-lm started holding 92 MiB where its plan said
        #   19 MiB), a larger neighbour waiting beside it could not take them back (the agent reclaims for a
        #   waiter only from a job holding at least as much), both waited, and the deadlock rule granted past the
        #   budget (5 and 8 grants in two runs of tools.colocate, resnet18 + tiny-lm). A job alone on its
        #   coordinator is never held and yields nothing; a neighbour outside the coordinator (an ungated, greedy
        #   job) cannot drain a job that has no gated neighbours.
        #   While it waits at the gate it is marked held there (Note [Held at the gate] in agent_server.cpp): once
        #   it has returned what it can, a neighbour waiting for memory inside its iteration is granted, not left
        #   to wait out its budget wait beside memory that comes back only when this job runs.
        yielding = run.gate.joined and run.gate.has_neighbours(run.job_id)
        self._mark_yielding(run, "gated" if yielding else "")
        try:
            delay = run.gate.wait(run.job_id, iteration)
        except RunStopped as stopped:
            run.stop_status = run.stop_status or stopped.status
            proc.send("stop", reason=run.stop_status)
            return
        finally:
            run.in_gate = False
            run.last_progress = time.monotonic()
            self._mark_yielding(run, "yielding" if yielding else "")
        run.iteration = iteration
        run.phase = "forward"
        self._time_beside(run, yielding)
        if delay > 0:
            run.delay_s += delay
            run.delays += 1
        run.gate.progress(run.job_id, "iteration_start", iteration)
        self.meter.begin(run.job_id)  # it computes from its go (the wait above is not compute)
        proc.send("go", delay_s=float(delay))
        run.began += 1
        run.on_message({"type": "go", "iteration": iteration, "delay_s": float(delay)})

    @staticmethod
    def _time_beside(run: JobRun, beside: bool) -> None:
        """At a go: count the iteration just ended (the last go to this one, its gate wait included) as beside a
        neighbour when the job had one on its coordinator at both gos and it was not the run's first iteration.

        Note [Slowdown beside neighbours]
            The plan predicts a job's slowdown while its group runs together (placement.groups.plan_group); a
            job whose neighbour ends first then runs alone, and its whole run's mean iteration mixes that solo
            tail in (the demo's digits-cnn: 1.44x over its run, about 2x while tiny-lm ran). So the agent times
            the iterations that began and ended beside a neighbour, start to start with the gate's wait (what
            the plan's slowdown counts), leaving out the run's first (warm-up) iteration; workers.runner makes
            ``slowdown`` of them (``slowdown_run`` is the whole run's). A neighbour that joined or left within
            the iteration counts it as beside only when present at both of its gos."""
        now = time.monotonic()
        if run.last_go is not None and beside and run.last_go_beside and run.began >= 2:
            run.beside_s += now - run.last_go
            run.beside_iterations += 1
        run.last_go, run.last_go_beside = now, beside

    def _outcome(self, run: JobRun, proc: JobProcess, returncode: int) -> dict[str, Any]:
        """Note [Outcome of a job process]."""
        # the job process's word: the names only this side measures go (zico_contracts.jobmetrics)
        metrics = jobmetrics.without_worker_metrics(dict((run.done or {}).get("metrics") or {}))
        metrics.update(peak_allocated_bytes=max(run.peak_allocated, int(metrics.get("peak_allocated_bytes", 0))),
                       peak_reserved_bytes=(run.held_peak if run.held_peak is not None else
                                            max(run.peak_reserved, int(metrics.get("peak_reserved_bytes", 0)))),
                       delay_s=round(run.delay_s, 4), delays=run.delays, peak_rss_anon_bytes=run.peak_rss_anon,
                       peak_shared_bytes=run.peak_shared,
                       **({"peak_disk_bytes": run.peak_disk} if run.peak_disk else {}))
        if run.beside_iterations:  # Note [Slowdown beside neighbours]
            metrics.update(beside_iteration_s=round(run.beside_s / run.beside_iterations, 6),
                           iterations_beside=run.beside_iterations)
        if run.budget_refusals:  # stopped at its own budget, or its default bound (zico_contracts.jobbudget)
            metrics[jobbudget.REFUSALS_METRIC] = run.budget_refusals
        if run.compute_share is not None:
            metrics[computeshare.METRIC] = run.compute_share
        if run.cpu_share is not None:
            metrics[cpushare.METRIC] = run.cpu_share
        out: dict[str, Any] = {"pid": run.job_pid or proc.pid, "returncode": returncode, "metrics": metrics}
        if run.done is not None and "curve" in run.done:  # a profile run's memory curve (workers.profiling)
            out["curve"] = run.done["curve"]
        if run.stop_status is not None and (run.done is None or run.done["status"] != "failed"):
            reason = STOP_REASONS.get(run.stop_status, "aborted (stale placement)")
            if run.killed_reason:
                reason += f" ({run.killed_reason})"
            return {**out, "status": run.stop_status, "reason": reason}
        exited = describe_exit(returncode, proc.sandboxed)
        if run.killed_reason is not None:
            headline = run.killed_reason
        elif run.done is not None:
            if run.done["status"] != "failed":
                return {**out, "status": run.done["status"], "reason": run.done.get("reason", "")}
            headline = run.done.get("reason") or "failed"
        else:
            site = crash_site(list(proc.stderr_tail), userjob.SANDBOX_DIRS["code_dir"]) if proc.sandboxed else ""
            headline = exited + site + " before reporting an outcome"
            limit = LIMIT_SIGNALS.get(exit_signal(returncode, proc.sandboxed) or "") if proc.sandboxed else None
            if limit:  # the kernel's signal at a sandbox limit: name the limit first
                headline = f"stopped by {userjob.LIMITS[limit].describe(self.settings.limits()[limit])}: {headline}"
        return {**out, "status": "failed", "reason": failure_reason(headline, exited, proc.tail(
            self.settings.reason_stderr_lines, crashed=run.done is None and run.killed_reason is None))}


TAIL_HEADING = "last {n} of stderr:"


def failure_reason(headline: str, exited: str, tail: str, max_chars: int = keys.REASON_MAX_CHARS) -> str:
    """A failed job's reason (Note [Outcome of a job process]): ``headline`` (what went wrong, for people), then
    on a line of its own how the process ended (``exited``, left out when the headline says it already), then
    the last lines of its stderr (``tail``, one string) under :data:`TAIL_HEADING`, as many of the last ones as
    fit in ``max_chars`` characters with the rest (what the web side stores). The tenant reads it: host paths in
    the headline and the tail are made neutral (Note [Host paths in what a tenant sees] in workers.joblines)."""
    headline, tail = neutral_paths(headline), neutral_paths(tail)
    head = "\n".join([headline] + ([exited] if exited not in headline else []))
    room = max_chars - len(head) - len(TAIL_HEADING) - 8
    kept: list[str] = []
    for line in reversed(tail.split("\n") if tail else []):
        room -= len(line) + 1
        if room < 0:
            break
        kept.insert(0, line)
    if not kept:
        return head
    n = f"{len(kept)} lines" if len(kept) > 1 else "line"
    return "\n".join([head, TAIL_HEADING.format(n=n), *kept])


def reason_summary(reason: str) -> str:
    """A failure reason without its stderr lines (:func:`failure_reason`): the headline and how it ended."""
    return re.split(r"\nlast (?:\d+ lines|line) of stderr:\n", reason, maxsplit=1)[0]
