"""Running one training job as its own OS process under the device agent: the body of ``zico.device.run_job``.

The task thread hands the job to the device's agent (:class:`workers.agent.DeviceAgent`), which launches
``python -m workers.jobproc`` for it, gates each of its iterations through the device's coordinator, watches it
and returns its outcome; this thread blocks until then. Meanwhile the job's messages become the web side's
lifecycle messages here: ``ready`` -> ``job_started``, ``metric`` -> ``job_progress`` (iterations done, the
rate, and the job's own figures as ``values``: what it reported with ``zico.log``), each gate answer
(``go``) -> the run's delay totals (``job_delay``, Note [Delays that count] in workers.gate).

Outcomes (``job_finished`` messages through :class:`workers.link.Link`): ``succeeded`` with metrics;
``cancelled`` within one iteration of a cancel request; ``failed`` with the job's error (an out-of-memory names
the allocator's reason), or with the agent's reason for a process that crashed, hung or allocated around the
pool (Note [Outcome of a job process] in workers.agent.agent). A run whose placement became stale is aborted
silently.

Note [A script's profile is the start of its run]
    A script job (a user's own code) without a stored curve is not profiled by a run of its own and then
    started again: the scheduler places it in a placement of its own (the job stays ``profiling``), alone
    on its device or beside jobs of known memory (Note [Where a script is profiled] in
    zico.scheduling.service), and sends ``run_job`` with ``profile``
    (``warmup``, ``steady``, ``time_limit_s``). The script starts as any run does, ungated (it has no curve
    yet; the device's budget still holds it); its first ``warmup + steady`` iterations are traced through
    the allocator (``workers.scriptproc``), then the job process sends ``profiled`` and goes on training.
    Here the trace becomes the curve (:func:`profiled_curve`), sent as ``profile_done`` with the placement
    (the web side stores it as the job's MemoryProfile, which reruns of the same code and command reuse,
    and moves the job to ``running``, so the scheduler sees the device hold a job of known memory and may
    place the next job beside it), and the agent gates the job with it from its next iteration on, as a new
    job (``DeviceAgent.set_curve``). A script that ends before its profile was complete succeeds or fails
    as it ended, with a curve from the iterations it had past the warm-up; past ``time_limit_s`` without
    them the run fails with that reason. A lost worker returns the job to the queue, to be profiled again.
    Catalog jobs are still profiled by ``zico.device.profile_job`` (workers.profiling): their curve comes
    before their placement, so they are planned from their first iteration.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from zico_contracts.specs import RunSpec, SpecError  # noqa: F401  (SpecError: for importers)

from . import checkpoints
from .device import DeviceRuntime
from .gate import DelayTally

log = logging.getLogger(__name__)

DELAY_REASON = "coordinator gate (time shift)"
SUPERSEDE_WAIT_S = 60.0  # longest wait for a stale profile run of the job to end (SIGTERM, then SIGKILL)


def _report_delays(link, spec: RunSpec, iteration: int, totals: dict | None) -> None:
    """Send a run's delay totals so far (DelayTally.report) as one ``job_delay`` message, when there are new ones."""
    if totals is not None:
        link.emit("job_delay", job=spec.job, placement=spec.placement, iteration=iteration, reason=DELAY_REASON,
                  **totals)


def slowdown_metrics(spec: RunSpec, train_s: float, ran: int) -> dict[str, Any]:
    """Measured and predicted slowdown on one definition (Note [Slowdown, predicted and measured] in
    zico.web.job_panels): ``mean_iteration_s`` (train seconds / iterations, gate waits included) over
    ``solo_iteration_s``, the iteration time of the curve the placement was planned with (``spec.curve``);
    ``predicted_slowdown`` is this job's entry of the plan. Keys absent when unknown."""
    out: dict[str, Any] = {}
    if ran > 0 and train_s > 0:
        out["mean_iteration_s"] = round(train_s / ran, 6)
    solo_s = (spec.curve or {}).get("iteration_s")
    if solo_s and "mean_iteration_s" in out:
        out["solo_iteration_s"] = solo_s
        out["slowdown"] = round((train_s / ran) / float(solo_s), 4)
    ids, predicted = spec.plan.get("job_ids"), spec.plan.get("predicted_slowdown")
    if isinstance(ids, list) and isinstance(predicted, list) and len(ids) == len(predicted) and spec.job in ids:
        out["predicted_slowdown"] = predicted[ids.index(spec.job)]
    return out


def run(rt: DeviceRuntime, spec: RunSpec) -> dict[str, Any]:
    """Run ``spec`` to an outcome on the worker's device. Returns the outcome dict (also sent as
    ``job_finished``). Never raises for training errors; raises RuntimeError if the job already runs here."""
    link, job_id = rt.link, spec.job
    done = link.done_outcome(job_id)
    if done and done.get("placement") == spec.placement and done.get("run_token") == spec.run_token:
        log.info("job %s placement %s already finished (%s); redelivery ignored", job_id, spec.placement,
                 done.get("status"))
        return done
    if done:  # another placement's, or another deployment's (same ids, other token): stale, not ours
        # A cancel request left with it was for that run too (a run marks done when cancelled). A cancel of
        # this run sent before it started is not lost: the job is then cancelled in the database and the
        # control consumer aborts this run at its job_started.
        # So is a checkpoint it left (a failed run keeps one): this run starts from iteration 0. A run requeued
        # after a worker loss in this deployment still resumes: a lost run never wrote a done record.
        log.info("job %s: stale done record (placement %s, token %s), its cancel request and checkpoint cleared",
                 job_id, done.get("placement"), done.get("run_token"))
        link.clear_done(job_id)
        checkpoints.remove(rt.config.checkpoint_dir, job_id)
    from . import usercode
    from .agent import JobRun
    from .agent.agent import reason_summary

    # Note [A stale profile run] in workers.profiling: a profile of this job still running here is stale
    if not rt.agent.supersede_profile(job_id, timeout_s=SUPERSEDE_WAIT_S):
        # a duplicate task: not even its directories are touched
        raise RuntimeError(f"job {job_id} is already running on {rt.agent.device}")
    outcome: dict[str, Any] = {"job": job_id, "placement": spec.placement, "run_token": spec.run_token}
    t_setup = time.monotonic()
    relay = _Relay(link, spec)
    output = usercode.LogRelay(link.redis, job_id)  # the job's stdout/stderr, live (zico_contracts.joblog)
    dirs = None
    try:
        if spec.code is not None:  # a command job: its code, fetched and unpacked here (workers.usercode)
            dirs = usercode.prepare(spec.code, job_id, rt.config.var_dir or rt.config.checkpoint_dir.parent)
            output.line("system", f"code {spec.code.code_sha256[:12]} unpacked; running {' '.join(spec.code.command)}")
            proc_spec = usercode.script_spec(spec.code, dirs, rt.torch_device, rt.config.data_dir)
            if spec.profile is not None:  # Note [A script's profile is the start of its run]
                proc_spec["profile"] = spec.profile
                relay.profiled = lambda msg: _send_profile(rt, spec, dirs, msg)
                output.line("system", f"profiling: the memory of the first {spec.profile['warmup'] + spec.profile['steady']} "
                                      "iterations is measured; the run goes on")
        else:
            proc_spec = job_process_spec(rt, spec)
        job = JobRun(job_id, proc_spec, curve=spec.curve, placement=spec.placement,
                     stop_check=lambda: link.stop_requested(job_id, spec.placement), on_message=relay.on_message,
                     tenant_id=spec.tenant or 0, on_output=output.line)
        relay.job = job
        result = rt.agent.run(job)  # raises CurveError (bad curve) or RuntimeError (already here) before launching
    except usercode.CodeFetchError as exc:
        result = {"status": "failed", "reason": str(exc), "metrics": {}}
    except OSError as exc:  # the process could not be launched: the job fails, the worker goes on
        log.exception("job %s could not be launched", job_id)
        result = {"status": "failed", "reason": f"could not start the job process: {type(exc).__name__}: {exc}",
                  "metrics": {}}
    except BaseException:
        output.close()
        raise
    metrics = dict(result.get("metrics") or {})
    if dirs is not None:  # before job_finished: the web side takes a job's files only until shortly after it ended
        metrics.update(usercode.upload_outputs(spec.code, dirs.output_dir))
        usercode.cleanup(dirs)
    # the reason without its stderr lines, which the log has just above
    summary = reason_summary(result.get("reason") or "").replace("\n", "; ")
    output.line("system", f"job {result['status']}" + (f": {summary}" if summary else ""))
    output.close()
    _report_delays(link, spec, relay.job.iteration if relay.job else -1, relay.delays.report(final=True))
    metrics.update(relay.delays.metrics(), wall_s=round(time.monotonic() - t_setup, 3), pid=result.get("pid"))
    ran = int(metrics.get("iterations_this_run") or metrics.get("iterations_done") or 0)  # catalog | script
    train_s = float(metrics.get("train_s") or 0.0)
    metrics.update(slowdown_metrics(spec, train_s, ran))
    outcome.update(status=result["status"], reason=result.get("reason", ""), metrics=metrics)
    if outcome["status"] != "aborted":
        link.emit("job_finished", job=job_id, placement=spec.placement, status=outcome["status"],
                  reason=outcome.get("reason", ""), metrics=outcome.get("metrics", {}))
        link.mark_done(job_id, outcome)
        if outcome["status"] in ("succeeded", "cancelled"):
            checkpoints.remove(rt.config.checkpoint_dir, job_id)
    link.flush()
    return outcome


def job_process_spec(rt: DeviceRuntime, spec: RunSpec) -> dict[str, Any]:
    """The ``--spec`` of the job's process (``workers.jobproc``): workload, params, torch device, checkpoint and
    data directories, checkpoint period (s) and the job's creation time (its checkpoints' owner)."""
    return {"workload": spec.workload, "params": spec.params, "device": rt.torch_device,
            "checkpoint_dir": str(rt.config.checkpoint_dir), "data_dir": str(rt.config.data_dir),
            "checkpoint_every_s": rt.config.checkpoint_every_s, "job_created_at": spec.job_created_at}


# Bookkeeping names in a job process's ``metric`` values, not the job's own figures: a script's optimizer steps
# (workers.scriptproc.MetricSink); a catalog job's next iteration index, its iterations done and its total
# (workers.jobproc).
SCRIPT_PROGRESS_KEYS = ("iterations_done",)
CATALOG_PROGRESS_KEYS = ("iteration", "iterations_done", "iterations")


def progress_values(values: dict[str, Any], first: int, script: bool) -> tuple[dict[str, Any], int]:
    """``(the job's own figures, iterations done)`` from a ``metric`` message's ``values``. The figures are
    what a script reported with ``zico.log`` (``script``), or a catalog workload's loss and accuracy, without
    the bookkeeping names above; iterations done is ``iterations_done`` (a catalog job's ``iteration``
    when absent), else ``first`` (the iteration the run started from)."""
    drop = SCRIPT_PROGRESS_KEYS if script else CATALOG_PROGRESS_KEYS
    done = values.get("iterations_done", None if script else values.get("iteration"))
    return {k: v for k, v in values.items() if k not in drop}, int(done) if done is not None else first


def profiled_curve(dirs, job_id: int, warmup: int, device: str, code) -> dict[str, Any]:
    """The memory curve (DESIGN contract, source ``allocator-trace``) from the trace a script job's first
    iterations left in its scratch dir (workers.scriptproc.PROFILE_TRACE). Raises ValueError saying why it is
    missing or holds no usable iteration."""
    import json
    from types import SimpleNamespace

    from placement.curves import CurveError
    from workers.curves.capture import allocator_records_to_trace
    from zico_workloads.curves.trace import trace_curve

    from .scriptproc import PROFILE_TRACE

    try:
        rows = json.loads((dirs.scratch_dir / PROFILE_TRACE).read_text())
        records = [SimpleNamespace(kind=k, timestamp_s=t, job_allocated_bytes=a, delta_bytes=d, iteration=i,
                                   job=job_id) for k, t, a, d, i in rows]
        curve = trace_curve(allocator_records_to_trace(records, job_id), warmup=warmup, source="allocator-trace",
                            device=device if device == "cpu" else f"cuda:{device.partition(':')[2] or 0}",
                            meta={"command": list(code.command), "code_sha256": code.code_sha256})
    except (OSError, ValueError, TypeError, CurveError) as exc:
        raise ValueError(f"the script's profile trace is unusable: {type(exc).__name__}: {exc}") from None
    return curve.to_dict()


def _send_profile(rt: DeviceRuntime, spec: RunSpec, dirs, msg: dict[str, Any]) -> None:
    """On the job's ``profiled``: send its curve (``profile_done`` with the placement) and gate the job with it;
    an unusable trace is sent as the profile's error (the web side fails the job and stops the run)."""
    try:
        curve = profiled_curve(dirs, spec.job, spec.profile["warmup"], rt.torch_device, spec.code)
        rt.agent.set_curve(spec.job, curve)
    except (ValueError, KeyError) as exc:  # CurveError is a ValueError
        log.warning("job %s: no curve from its profile: %s", spec.job, exc)
        rt.link.emit("profile_done", job=spec.job, placement=spec.placement, error=str(exc)[:1500])
    else:
        spec.curve = curve  # the run's slowdown is measured against it (slowdown_metrics)
        rt.link.emit("profile_done", job=spec.job, placement=spec.placement, curve=curve,
                     profile_s=msg.get("profile_s"), iterations=msg.get("iterations"))
    rt.link.flush()


class _Relay:
    """Turns a job process's messages (in the agent's reader thread) into the run's lifecycle messages."""

    def __init__(self, link, spec: RunSpec):
        self.link, self.spec = link, spec
        self.delays = DelayTally()
        self.first = 0
        self.iterations = 0
        self.t0: float | None = None
        self.job = None  # the JobRun, once made
        self.profiled = None  # on a script job's ``profiled`` (Note [A script's profile is the start of its run])

    def on_message(self, msg: dict[str, Any]) -> None:
        kind, spec = msg["type"], self.spec
        if kind == "ready":
            self.first, self.iterations, self.t0 = msg["resumed_from"], msg["iterations"], time.monotonic()
            if self.first:
                log.info("job %s resumes from its checkpoint after iteration %d", spec.job, self.first - 1)
            self.link.emit("job_started", job=spec.job, placement=spec.placement, resumed_from=self.first,
                           iterations=self.iterations, pid=(self.job.job_pid or self.job.pid) if self.job else None)
            self.link.flush()
        elif kind == "go":
            self.delays.add(msg["delay_s"])
        elif kind == "profiled" and self.profiled is not None:
            self.profiled(msg)
        elif kind == "metric" and self.t0 is not None:
            if msg.get("iterations_total"):  # a script's own count (zico.set_iterations_total)
                self.iterations = int(msg["iterations_total"])
            values, done = progress_values(msg["values"], self.first, spec.code is not None)
            elapsed = time.monotonic() - self.t0
            self.link.emit("job_progress", job=spec.job, placement=spec.placement, iteration=done,
                           iterations=self.iterations, values=values,
                           iterations_per_s=round((done - self.first) / elapsed, 4) if elapsed > 0 else None)
            _report_delays(self.link, spec, done - 1, self.delays.report())
