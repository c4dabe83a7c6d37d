"""Running one training job in its own thread of a device worker: the body of ``zico.device.run_job``.

For each job the runner builds the catalog workload on the device, resumes it from its checkpoint, binds the
thread (and on CUDA its own stream) to the job in the shared allocator, and loops over iterations:

    stop requested?  ->  the coordinator's gate (may block: the time shift)  ->  one training iteration
    ->  marks to the allocator, the coordinator and the reporter  ->  checkpoint every few seconds

Outcomes (``job_finished`` messages through :class:`workers.link.Link`): ``succeeded`` with metrics;
``cancelled`` within one iteration of a cancel request; ``failed`` with the exception's message (an
out-of-memory names the allocator's reason). A run whose placement became stale is aborted silently.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from . import checkpoints
from .device import DeviceRuntime, JobState
from .gate import DelayTally, Gate, RunStopped

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 1.0
DELAY_REASON = "coordinator gate (time shift)"


class SpecError(ValueError):
    """The run_job spec is malformed; the message names the field."""


@dataclass
class RunSpec:
    """What the scheduler sends with ``zico.device.run_job`` (JSON).

    Attributes:
        job: job id.
        workload: catalog key, e.g. ``"digits-cnn"``.
        params: workload params (validated again here against the catalog schema).
        placement: id of the placement this run belongs to (stale runs are aborted by the web side).
        run_token: the placement's random ``run_token`` (a UUID string). With the placement id it names this
            run across deployments: a done record carrying another token was left by an earlier database
            (ids restart at 1) and does not stop this run. None when the sender does not set one.
        curve: the job's memory curve (DESIGN contract) for the coordinator; None disables gating.
        plan: the placement's sharing plan (``shifts_s`` per job id, ``budget_bytes``, ...).
        job_created_at: the job's creation time (ISO 8601): with the id it names the job across deployments,
            so a checkpoint left by an earlier database's job of the same id is not resumed
            (Note [Checkpoints across deployments] in workers.checkpoints). None when the sender does not set it.
    """

    job: int
    workload: str
    params: dict[str, Any]
    placement: int | None = None
    run_token: str | None = None
    curve: dict[str, Any] | None = None
    plan: dict[str, Any] = field(default_factory=dict)
    job_created_at: str | None = None

    @classmethod
    def parse(cls, job_id: Any, spec: Any) -> "RunSpec":
        if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id <= 0:
            raise SpecError(f"job_id: expected a positive integer, got {job_id!r}")
        if not isinstance(spec, dict):
            raise SpecError(f"spec: expected a JSON object, got {type(spec).__name__}")
        workload = spec.get("workload")
        if not isinstance(workload, str) or not workload:
            raise SpecError("workload: missing or not a string")
        params = spec.get("params") or {}
        if not isinstance(params, dict):
            raise SpecError("params: expected a JSON object")
        placement = spec.get("placement", spec.get("placement_id"))
        if placement is not None and (isinstance(placement, bool) or not isinstance(placement, int)):
            raise SpecError(f"placement: expected an integer id, got {placement!r}")
        run_token = _optional_text(spec, "run_token")
        curve = spec.get("curve")
        if curve is not None and not isinstance(curve, dict):
            raise SpecError("curve: expected a memory curve object")
        plan = spec.get("plan") or {}
        if not isinstance(plan, dict):
            raise SpecError("plan: expected a JSON object")
        return cls(job_id, workload, params, placement, run_token, curve, plan, _optional_text(spec, "job_created_at"))


def _optional_text(spec: dict, key: str) -> str | None:
    """``spec[key]``: None when absent, else a non-empty string; raises SpecError naming ``key``."""
    value = spec.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise SpecError(f"{key}: expected a non-empty string, got {value!r}")
    return value


class RunMarks:
    """Fans the training loop's marks out to the allocator, the coordinator gate and the reporter state."""

    def __init__(self, rt: DeviceRuntime, state: JobState, gate: Gate):
        self.rt, self.state, self.gate = rt, state, gate

    def _mark(self, kind: str, i: int) -> None:
        mark = getattr(self.rt.allocator, "mark", None)
        if mark is not None:
            mark(self.state.job_id, kind, i)

    def iteration_start(self, i: int) -> None:
        self.state.iteration = i
        self._mark("iteration_start", i)
        self.gate.progress(self.state.job_id, "iteration_start", i)

    def phase(self, name: str) -> None:
        self.state.phase = name
        self._mark(name, self.state.iteration)
        self.gate.progress(self.state.job_id, name, self.state.iteration)

    def iteration_end(self, i: int) -> None:
        self.state.phase = "done"
        self._mark("iteration_end", i)
        self.gate.progress(self.state.job_id, "iteration_end", i)


def _report_delays(link, spec: RunSpec, iteration: int, totals: dict | None) -> None:
    """Send a run's delay totals so far (DelayTally.report) as one ``job_delay`` message, when there are new ones."""
    if totals is not None:
        link.emit("job_delay", job=spec.job, placement=spec.placement, iteration=iteration, reason=DELAY_REASON,
                  **totals)


def _stats(rt: DeviceRuntime, job_id: int) -> dict[str, int]:
    try:
        st = rt.allocator.memory_stats(job=job_id, device=rt.alloc_device)
    except Exception:  # stats are best effort at the end of a run
        return {}
    return {"peak_allocated_bytes": int(st.get("allocated_bytes.all.peak", 0)),
            "peak_reserved_bytes": int(st.get("reserved_bytes.all.peak", 0))}


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


def _release_cache_if_idle(rt: DeviceRuntime) -> None:
    """Return the pool's cached segments to the device once no job runs on it, so an idle device reads
    as idle (reserved 0) on the cluster page instead of holding the last jobs' cache."""
    empty_cache = getattr(rt.allocator, "empty_cache", None)
    if empty_cache is None or rt.jobs():
        return
    try:
        empty_cache(device=rt.alloc_device)
    except Exception:  # best effort: the cache is released on the next job's demand anyway
        log.exception("empty_cache failed on %s", rt.device)


def _oom_reason(rt: DeviceRuntime) -> str:
    last_oom = getattr(rt.allocator, "last_oom", None)
    try:
        info = last_oom(device=rt.alloc_device) if last_oom else None
    except Exception:
        info = None
    return f" (allocator: {info})" if info else ""


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
    gate = Gate(rt, spec)  # raises CurveError for a malformed curve, before anything is registered
    state = JobState(job_id=job_id, iterations=int(spec.params.get("iterations") or 0), gate=gate)
    rt.add_job(state)  # raises if this job already runs in this process
    outcome: dict[str, Any] = {"job": job_id, "placement": spec.placement, "run_token": spec.run_token}
    t_setup = time.monotonic()
    try:
        outcome.update(_train(rt, spec, state, gate, t_setup))
    except Exception as exc:  # any training error ends the job as failed, with its message
        log.exception("job %s failed", job_id)
        outcome.update(status="failed", reason=f"{type(exc).__name__}: {exc}"[:1500] + _oom_reason(rt),
                       metrics={**_stats(rt, job_id), "wall_s": time.monotonic() - t_setup})
    finally:
        gate.leave(job_id)
        rt.remove_job(job_id)
        _release_cache_if_idle(rt)
    if outcome["status"] != "aborted":
        link.emit("job_finished", job=job_id, placement=spec.placement, status=outcome["status"],
                  reason=outcome.get("reason", ""), metrics=outcome.get("metrics", {}))
        link.mark_done(job_id, outcome)
        if outcome["status"] in ("succeeded", "cancelled"):
            checkpoints.remove(rt.config.checkpoint_dir, job_id)
    link.flush()
    return outcome


def _train(rt: DeviceRuntime, spec: RunSpec, state: JobState, gate: Gate, t_setup: float) -> dict[str, Any]:
    from workers.workloads.catalog import validate_params
    from workers.workloads.models import preload_data
    from workers.workloads.training import create_training_job

    from .binding import job_context

    link, job_id = rt.link, spec.job
    # Data sets stay on the host, loaded once per process and outside the binding: the job is charged with
    # what its training allocates, as in its profile (workers.curves.capture).
    preload_data(validate_params(spec.workload, spec.params), rt.config.data_dir)
    with job_context(rt, job_id):
        job = create_training_job(spec.workload, spec.params, device=rt.torch_device, data_dir=rt.config.data_dir)
        state.iterations = job.iterations
        ckpt = checkpoints.load(rt.config.checkpoint_dir, job_id, spec.job_created_at)
        first = 0
        prior_s = 0.0
        if ckpt is not None:
            job.load_state_dict(ckpt["state"])
            first = job.iterations_done
            prior_s = float(ckpt.get("train_s", 0.0))
            log.info("job %s resumes from its checkpoint after iteration %d", job_id, first - 1)
        link.emit("job_started", job=job_id, placement=spec.placement, resumed_from=first,
                  iterations=job.iterations, pid=rt.pid)
        link.flush()
        marks = RunMarks(rt, state, gate)
        gate.join(job_id)
        t0 = time.monotonic()
        next_progress = t0 + PROGRESS_EVERY_S
        next_ckpt = t0 + rt.config.checkpoint_every_s
        delays = DelayTally()
        saves = checkpoints.SaveTally()  # a failed save is counted, not fatal (workers.checkpoints)
        status = "succeeded"
        for i in range(first, job.iterations):
            stop = link.stop_requested(job_id, spec.placement)
            if stop:
                status = stop
                break
            state.phase = "wait"
            try:
                delay = gate.wait(job_id, i)
            except RunStopped as stopped:
                status = stopped.status
                break
            delays.add(delay)
            job.run_iteration(i, marks)
            now = time.monotonic()
            if now >= next_ckpt and i + 1 < job.iterations:
                state.phase = "checkpoint"
                saves.save(rt.config.checkpoint_dir, job_id, i, job.state_dict(),
                           train_s=prior_s + now - t0, job_created_at=spec.job_created_at)
                next_ckpt = time.monotonic() + rt.config.checkpoint_every_s
            if now >= next_progress:
                next_progress = now + PROGRESS_EVERY_S
                link.emit("job_progress", **{**job.metrics(), "job": job_id, "placement": spec.placement,
                                             "iteration": i + 1, "iterations": job.iterations,
                                             "iterations_per_s": round((i + 1 - first) / (now - t0), 4)})
                _report_delays(link, spec, i, delays.report())
        _report_delays(link, spec, state.iteration, delays.report(final=True))
        train_s = time.monotonic() - t0
        ran = job.iterations_done - first
        metrics = {**job.metrics(), **_stats(rt, job_id), "train_s": round(train_s, 3),
                   "wall_s": round(time.monotonic() - t_setup, 3), "resumed_from": first,
                   "iterations_this_run": ran, "iterations_per_s": round(ran / train_s, 4) if train_s > 0 else None,
                   **delays.metrics(), **saves.metrics()}
        metrics.update(slowdown_metrics(spec, train_s, ran))
        state.phase = "done"
        if status == "aborted":
            return {"status": "aborted", "metrics": metrics}
        reason = "cancelled on request" if status == "cancelled" else ""
        return {"status": status, "reason": reason, "metrics": metrics}
