"""Running one training job as its own OS process under the device agent: the body of ``zico.device.run_job``.

The task thread hands the job to the device's agent (:class:`workers.agent.DeviceAgent`), which launches
``python -m workers.job.entry`` for it in its sandbox (a user's own code, or for a catalog job the built-in
catalog project: Note [Catalog jobs run as scripts]), gates each of its iterations through the device's
coordinator, watches it and returns its outcome; this thread blocks until then. Meanwhile the job's messages
become the web side's lifecycle messages here: ``ready`` -> ``job_started``, ``metric`` -> ``job_progress``
(iterations done, the rate, and the job's own figures as ``values``: what it reported with ``zico.log``), each
gate answer (``go``) -> the run's delay totals (``job_delay``, Note [Delays that count] in workers.gate).

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
    yet; its own budget holds it, or beside other jobs without one the default bound the spec carries as its
    budget, lifted at its curve, else the device's budget); its first ``warmup + steady`` iterations are traced through
    the allocator (``workers.job.entry``), then the job process sends ``profiled`` and goes on training.
    Here the trace becomes the curve (:func:`workers.profiletrace.profiled_curve`), sent as ``profile_done`` with the placement
    (the web side stores it as the job's MemoryProfile, which reruns of the same code and command reuse,
    and moves the job to ``running``, so the scheduler sees the device hold a job of known memory and may
    place the next job beside it), and the agent gates the job with it from its next iteration on, as a new
    job (``DeviceAgent.set_curve``). A script that ends before its profile was complete succeeds or fails
    as it ended, with a curve from the iterations it had past the warm-up; past ``time_limit_s`` without
    them the run fails with that reason. A lost worker returns the job to the queue, to be profiled again.
    Catalog jobs are still profiled by ``zico.device.profile_job`` (workers.profiling): their curve comes
    before their placement, so they are planned from their first iteration.

Note [Catalog jobs run as scripts]
    A catalog job (a ``workload`` with ``params``) runs by the same path as a user's own code: its code is the
    built-in project ``workers/job/catalog_project`` (an ordinary script, ``train.py``, that builds the workload
    from ``zico_workloads`` by key and params and trains it, reporting its figures with the optional ``zico``
    API), its command ``python train.py --workload KEY --params JSON [--checkpoint-every-s S] [--created-at
    T]`` (:func:`catalog_script_spec`), run by ``workers.job.entry`` in the job's sandbox, which mounts
    ``zico_workloads`` read-only beside the rest of the job-side code. So its iterations are the optimizer's
    steps (``workers.job.stepclock``), gated there, and its memory is the whole job process's pool (CPU shim
    scope "all": the preloaded data set counts too). What differs
    from a user's script: no archive is fetched and no output uploaded; its output directory is the job's
    checkpoint directory (``<ZICO_CHECKPOINT_DIR>/job-<id>``, kept for a resume; removed as before when the
    job succeeded or was cancelled); the built-in corpus is written to the data directory before the start
    (the job sees it read-only); its threads and cores are its slot's (Note [Compute per slot] in
    zico_contracts.cpushare; an agent without slots, as the benchmarks run one, passes on its own
    ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS``). The
    project reports the iteration it resumed from and the total (``resumed_from``, ``iterations``: the
    progress and rate count from there), so ``job_started`` says ``resumed_from`` 0 even for a resumed run;
    its metrics say where it resumed. A stop (cancel, stale placement) raises at the next iteration start in
    the optimizer's step, after that step: the checkpoint saved then records one iteration fewer than the
    weights hold, and a resumed run repeats that one step. Where no sandbox can run (no bubblewrap:
    ``DeviceAgent.user_code_refusal``) a catalog job runs the same way, the process without its sandbox around
    it (Note [No sandbox for Zico's own code] in workers.agent.sandbox); a user's script is refused there.

Note [Two runs of one job]
    Two ``run_job`` tasks of one job can reach a worker together. A worker killed while a job's ``run_job`` still
    waited in its queue (a script job then is ``profiling`` already) is replaced by a process whose ``worker_up``
    makes the web side declare the job lost and place it again (zico.telemetry.handlers.on_worker_up), so the
    new process receives both the queued task of the ended placement and the new placement's. The web side aborts
    a stale run only at its ``job_started``. Before this, whichever came second was refused ("already running"),
    after wiping the first one's directories (``usercode.prepare``), and when the refused one was the job's
    current run nothing ever sent it again: the job sat ``profiling`` with no process until the profiling time
    limit failed it. So a ``run_job`` holds its job in this process from its first step to its last
    (:class:`_JobsHere`): a run of a later placement stops a run of an earlier one, which is stale (the scheduler
    opens a job's new placement only once the earlier one has ended), waits for it to end (``SUPERSEDE_WAIT_S``)
    and goes ahead; the stale run ends ``aborted``, sending nothing. A run of the same placement (a resent task)
    or of an earlier one than the run here is refused with RuntimeError, touching nothing.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zico_contracts import jobbudget, jobmetrics, userjob, walltime
from zico_contracts.specs import RunSpec, SpecError  # noqa: F401  (SpecError: for importers)

from . import jobdisk
from .agent.sandbox import CATALOG_PROJECT  # the built-in project a catalog job runs
from .job import checkpoints
from .device import DeviceRuntime
from .gate import DelayTally
from .joblines import escape_controls, neutral_paths
from .profiletrace import profiled_curve

log = logging.getLogger(__name__)

SUPERSEDE_WAIT_S = 60.0  # longest wait for a stale run or profile run of the job to end (SIGTERM, then SIGKILL)


def _report_delays(link, spec: RunSpec, iteration: int, totals: dict | None) -> None:
    """Send a run's delay totals so far (DelayTally.report) as one ``job_delay`` message, when there are new ones."""
    if totals is not None:
        link.emit("job_delay", job=spec.job, placement=spec.placement, iteration=iteration, **totals)


def slowdown_metrics(spec: RunSpec, train_s: float, ran: int, beside_iteration_s: float | None = None
                     ) -> dict[str, Any]:
    """Measured and predicted slowdown on one definition (Note [Slowdown, predicted and measured] in
    zico.web.job_panels): ``slowdown`` is ``beside_iteration_s`` (the agent's mean iteration beside a neighbour,
    Note [Slowdown beside neighbours] in workers.agent.agent) over ``solo_iteration_s``, the iteration time of
    the curve the placement was planned with (``spec.curve``), or the whole run's where the job never had one;
    ``slowdown_run`` is always the whole run's ``mean_iteration_s`` (train seconds / iterations, gate waits
    included) over it; ``predicted_slowdown`` is this job's entry of the plan. Keys absent when unknown."""
    out: dict[str, Any] = {}
    if ran > 0 and train_s > 0:
        out["mean_iteration_s"] = round(train_s / ran, 6)
    solo_s = (spec.curve or {}).get("iteration_s")
    if solo_s and "mean_iteration_s" in out:
        out["solo_iteration_s"] = solo_s
        out["slowdown_run"] = round((train_s / ran) / float(solo_s), 4)
        out["slowdown"] = (round(beside_iteration_s / float(solo_s), 4) if beside_iteration_s
                           else out["slowdown_run"])
    ids, predicted = spec.plan.get("job_ids"), spec.plan.get("predicted_slowdown")
    if isinstance(ids, list) and isinstance(predicted, list) and len(ids) == len(predicted) and spec.job in ids:
        out["predicted_slowdown"] = predicted[ids.index(spec.job)]
    return out


@dataclass
class _Claim:
    placement: int | None
    superseded: bool = False  # a run of a later placement of the job stopped this one


class _JobsHere:
    """The jobs whose ``run_job`` is in progress in this process, each with its run's placement (Note [Two runs
    of one job])."""

    def __init__(self):
        self._claims: dict[int, _Claim] = {}
        self._changed = threading.Condition()

    @contextmanager
    def claim(self, spec: RunSpec, timeout_s: float):
        """Hold ``spec.job`` here for the run of ``spec.placement``, stopping (``superseded``) and waiting out a
        run of an earlier placement; yields the run's _Claim. Raises RuntimeError when a run of the job of the same
        or a later placement (or one without a placement) is here, or an earlier one's did not end within
        ``timeout_s`` seconds."""
        job_id, deadline = spec.job, time.monotonic() + timeout_s
        with self._changed:
            while (other := self._claims.get(job_id)) is not None:
                if spec.placement is None or other.placement is None or other.placement >= spec.placement:
                    raise RuntimeError(f"job {job_id} is already running here (placement {other.placement})")
                if not other.superseded:
                    log.warning("job %s: its run of placement %s is stale; stopped for placement %s", job_id,
                                other.placement, spec.placement)
                other.superseded = True
                if not self._changed.wait_for(lambda: self._claims.get(job_id) is not other,
                                              timeout=deadline - time.monotonic()):
                    raise RuntimeError(f"job {job_id}: its stale run of placement {other.placement} did not end "
                                       f"within {timeout_s:g} s")
            claim = self._claims[job_id] = _Claim(spec.placement)
        try:
            yield claim
        finally:
            with self._changed:
                del self._claims[job_id]
                self._changed.notify_all()


_jobs_here = _JobsHere()


def run(rt: DeviceRuntime, spec: RunSpec) -> dict[str, Any]:
    """Run ``spec`` to an outcome on the worker's device. Returns the outcome dict (also sent as
    ``job_finished``); a run stopped by a later placement's run of the job returns ``aborted`` and sends nothing
    (Note [Two runs of one job]). Never raises for training errors; raises RuntimeError if the job already runs
    here (the same or a later placement), or a stale run of it did not end within ``SUPERSEDE_WAIT_S``."""
    with _jobs_here.claim(spec, SUPERSEDE_WAIT_S) as claim:
        return _run(rt, spec, claim)


def _run(rt: DeviceRuntime, spec: RunSpec, claim: _Claim) -> dict[str, Any]:
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
    from . import jobenv, usercode
    from .agent import JobRun
    from .agent.agent import reason_summary

    # Note [A stale profile run] in workers.profiling: a profile of this job still running here is stale
    if not rt.agent.supersede_profile(job_id, timeout_s=SUPERSEDE_WAIT_S):
        # a profile that outlived the wait (a duplicate run_job was refused above): its directories are untouched
        raise RuntimeError(f"job {job_id} is already running on {rt.agent.device}")
    outcome: dict[str, Any] = {"job": job_id, "placement": spec.placement, "run_token": spec.run_token}
    t_setup = time.monotonic()
    relay = _Relay(link, spec)
    output = usercode.LogRelay(link.redis, job_id)  # the job's stdout/stderr, live (zico_contracts.joblog)
    dirs, job_env = None, None
    try:
        if spec.code is not None:  # a command job: its code, fetched and unpacked here (workers.usercode)
            dirs = usercode.prepare(spec.code, job_id, rt.config.var_dir or rt.config.checkpoint_dir.parent,
                                    jobdisk.of_runtime(rt))
            proc_spec = usercode.script_spec(spec.code, dirs, rt.torch_device, rt.config.data_dir)
            job_env = prepare_environment(link, spec, dirs, output)  # Note [A job's own environment]
            if job_env is not None:
                proc_spec["env_dir"] = str(job_env.site)
            output.line("system", f"code {spec.code.code_sha256[:12]} unpacked; running {' '.join(spec.code.command)}")
            if spec.profile is not None:  # Note [A script's profile is the start of its run]
                proc_spec["profile"] = spec.profile
                relay.profiled = lambda msg: _send_profile(rt, spec, dirs, msg)
                output.line("system", f"profiling: the memory of the first {spec.profile['warmup'] + spec.profile['steady']} "
                                      "iterations is measured; the run goes on")
        else:  # a catalog job: the built-in catalog project, run as a script (Note [Catalog jobs run as scripts])
            try:
                dirs, proc_spec = catalog_script_spec(rt, spec)
            except ValueError as exc:  # bad params (checked at submission; the catalog may have changed since)
                raise _NotStarted(f"{type(exc).__name__}: {exc}") from None
            output.line("system", f"running the catalog project's {' '.join(proc_spec['argv'][:4])}")
        job = JobRun(job_id, proc_spec, curve=spec.curve, placement=spec.placement, on_message=relay.on_message,
                     stop_check=lambda: "aborted" if claim.superseded else link.stop_requested(job_id, spec.placement),
                     tenant_id=spec.tenant or 0, budget_bytes=spec.job_budget_bytes, on_output=output.line,
                     wall_limit=spec.wall_limit, budget_default=spec.job_budget_default)
        if spec.job_budget_default:  # Note [Where a script is profiled] in zico.scheduling.service
            output.line("system", f"profiled beside other jobs under {jobbudget.describe(spec.job_budget_bytes)} "
                                  "(no --budget given): it holds until the memory curve is stored")
        if spec.wall_limit is not None:  # Note [A job's wall-clock limit] in workers.agent.agent
            output.line("system", f"wall-clock limit: {walltime.describe(spec.wall_limit)}, from the start of the "
                                  "job's process")
        relay.job = job
        result = rt.agent.run(job)  # raises CurveError (bad curve) or RuntimeError (already here) before launching
    except (usercode.CodeFetchError, jobenv.BuildError, _NotStarted) as exc:
        result = {"status": "failed", "reason": str(exc), "metrics": {}}
    except OSError as exc:  # the process could not be launched: the job fails, the worker goes on
        log.exception("job %s could not be launched", job_id)
        result = {"status": "failed", "reason": f"could not start the job process: {type(exc).__name__}: {exc}",
                  "metrics": {}}
    except BaseException:
        output.close()
        if job_env is not None:
            job_env.release()
        if dirs is not None:  # its file system unmounted (Note [A job's disk] in workers.agent.diskwatch)
            jobdisk.remove_run_dir(dirs.scratch_dir.parent, jobdisk.of_runtime(rt))
        raise
    # the tenant reads the reason: no host path in it (Note [Host paths in what a tenant sees] in workers.joblines)
    result["reason"] = neutral_paths(result.get("reason") or "")
    metrics = dict(result.get("metrics") or {})
    if job_env is not None:
        job_env.release()
        metrics["environment"] = job_env.describe()
    if dirs is not None and spec.code is not None:  # before job_finished: the web side takes a job's files only
        uploaded = usercode.upload_outputs(spec.code, dirs.output_dir)  # until shortly after it ended
        metrics.update(uploaded)
        for line in usercode.skipped_lines(uploaded):  # what was not kept, where the user reads the run
            output.line("system", line)
        usercode.cleanup(dirs, jobdisk.of_runtime(rt))
    elif dirs is not None:  # a catalog job: its output directory is its checkpoint's, kept for a resume
        jobdisk.remove_run_dir(dirs.scratch_dir.parent, jobdisk.of_runtime(rt))
        if isinstance(metrics.get("checkpoint_last_failure"), str):  # the host's path, not the sandbox's
            metrics["checkpoint_last_failure"] = metrics["checkpoint_last_failure"].replace(
                userjob.SANDBOX_DIRS["output_dir"] + "/", f"{dirs.output_dir}/")
        metrics.pop("iteration", None)  # a progress figure of the project's, not a metric
        if "iterations_this_run" in metrics:  # iterations done in all, as the job's checkpoints count them
            metrics["iterations_done"] = int(metrics.get("resumed_from") or 0) + int(metrics["iterations_this_run"])
    # the reason without its stderr lines, which the log has just above
    summary = reason_summary(result.get("reason") or "").replace("\n", "; ")
    output.line("system", f"job {result['status']}" + (f": {summary}" if summary else ""))
    output.close()
    _report_delays(link, spec, relay.job.iteration if relay.job else -1, relay.delays.report(final=True))
    metrics.update(relay.delays.metrics(), wall_s=round(time.monotonic() - t_setup, 3), pid=result.get("pid"))
    ran = int(metrics.get("iterations_this_run") or metrics.get("iterations_done") or 0)  # catalog | script
    train_s = float(metrics.get("train_s") or 0.0)
    metrics.update(slowdown_metrics(spec, train_s, ran, metrics.get("beside_iteration_s")))
    outcome.update(status=result["status"], reason=result.get("reason", ""), metrics=metrics)
    if outcome["status"] != "aborted":
        link.emit("job_finished", job=job_id, placement=spec.placement, status=outcome["status"],
                  reason=outcome.get("reason", ""), metrics=outcome.get("metrics", {}))
        link.mark_done(job_id, outcome)
        if outcome["status"] in ("succeeded", "cancelled"):
            checkpoints.remove(rt.config.checkpoint_dir, job_id)
    link.flush()
    return outcome


def prepare_environment(link, spec: RunSpec, dirs, output):
    """The held environment a command job's project asks for (None: none), its build streamed to the job's log
    and its state sent as ``job_environment`` messages. Raises workers.jobenv.BuildError.

    Note [A job's own environment]
        A project's ``requirements.txt`` (or ``pyproject.toml`` dependencies) becomes an environment built on
        this host before the job process starts (``workers.jobenv``: once per distinct set, cached, layered on
        the worker's torch) and mounted read-only in the sandbox. While it builds the job is *preparing*: the
        worker sends ``job_environment`` with ``state`` ``preparing`` and the last installer line as
        ``progress`` (at most one a second), then ``ready`` (key, packages, build time) or ``failed``. The
        requirements are files of the code archive, so the same code is the same environment: a job's curve
        and profile, keyed by its code, are keyed by its environment too.
    """
    from . import jobenv

    last = [0.0]

    def send(state: str, **fields) -> None:
        link.emit("job_environment", job=spec.job, placement=spec.placement, state=state, **fields)

    def on_line(line: str) -> None:
        output.line("system", line)
        now = time.monotonic()
        if line.strip() and now - last[0] >= 1.0:
            last[0] = now
            send("preparing", progress=line.strip()[:200])

    try:
        env = jobenv.for_project(dirs.code_dir, on_line)
    except jobenv.BuildError as exc:
        send("failed", progress=str(exc)[:200])
        raise
    if env is not None:
        output.line("system", f"environment {env.key[:12]} " + (
            "reused (build time 0 s)" if env.cached else f"built in {env.build_s:.1f} s") +
                    f": {', '.join(env.packages) or 'nothing to add to the worker packages'}")
        send(**env.describe())
    return env


CATALOG_SCRIPT = "train.py"
PASSED_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # an agent without CPU slots: its own thread counts, kept


def catalog_script_spec(rt: DeviceRuntime, spec: RunSpec, profile: dict[str, Any] | None = None
                        ) -> tuple[Any, dict[str, Any]]:
    """``(dirs, the job process's spec)`` of a catalog job run as a user script is (Note [Catalog jobs run as
    scripts]): code ``workers/job/catalog_project``, command ``python train.py --workload ... --params JSON ...``,
    output directory the job's checkpoint directory (``<checkpoint dir>/job-<id>``, kept after the run), scratch
    ``<var>/jobs/<id>/scratch`` (the caller removes ``dirs.scratch_dir.parent`` after the run, with
    ``workers.jobdisk.remove_run_dir``: it may be a file system of its own). The built-in
    corpus is written to the data directory here, since the job sees it read-only.

    ``profile`` (``warmup``, ``steady``, ``time_limit_s``): a profile run (workers.profiling) instead, of
    ``warmup + steady`` iterations, without checkpoints, its output directory a throwaway one under
    ``<var>/jobs/profile-<id>/``. ``spec`` is then a ProfileSpec (``job``, ``workload``, ``params``).
    Raises ParamsError / UnknownWorkload (ValueErrors) for bad params."""
    from zico_workloads.catalog import validate_params
    from zico_workloads.corpus import DEFAULT_CORPUS, ensure_corpus

    from .usercode import JobDirs

    params = validate_params(spec.workload, spec.params)
    data_dir = Path(rt.config.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    if params.get("data") == "real" and params.get("corpus") == DEFAULT_CORPUS:
        ensure_corpus(data_dir)
    run_dir = Path(rt.config.var_dir or rt.config.checkpoint_dir.parent) / "jobs" / (
        f"profile-{spec.job}" if profile else str(spec.job))
    # a requeued run starts clean (its checkpoint is elsewhere); Note [A job's disk] in workers.agent.diskwatch
    jobdisk.make_run_dir(run_dir, jobdisk.of_runtime(rt))
    output = run_dir / "output" if profile else checkpoints.checkpoint_path(rt.config.checkpoint_dir, spec.job).parent
    dirs = JobDirs(CATALOG_PROJECT, output, run_dir / "scratch")
    dirs.scratch_dir.mkdir(parents=True)
    run_params = {**spec.params, "iterations": profile["warmup"] + profile["steady"]} if profile else spec.params
    argv = ["python", CATALOG_SCRIPT, "--workload", spec.workload, "--params", json.dumps(run_params)]
    if rt.config.checkpoint_every_s and not profile:
        argv += ["--checkpoint-every-s", str(rt.config.checkpoint_every_s)]
    if getattr(spec, "job_created_at", None):
        argv += ["--created-at", str(spec.job_created_at)]
    slotted = getattr(rt.agent, "cpu_slots", None) is not None  # else the job's env would override its slot's
    env = {} if slotted else {k: os.environ[k] for k in PASSED_ENV if os.environ.get(k)}
    return dirs, {"kind": "script", "code_dir": str(dirs.code_dir), "argv": argv, "env": env,
                  "device": rt.torch_device, "output_dir": str(dirs.output_dir), "scratch_dir": str(dirs.scratch_dir),
                  "data_dir": str(data_dir), "iterations": int(run_params.get("iterations", params["iterations"])),
                  **({"profile": profile} if profile else {})}


class _NotStarted(RuntimeError):
    """The job's process was not started; the message says why (the job then fails with it)."""


# Bookkeeping names in a job process's ``metric`` values, not the job's own figures: a script's optimizer steps
# (workers.job.entry.MetricSink); the catalog project's iteration reached, the iteration it resumed from, the
# total and this run's count (workers/job/catalog_project/train.py), besides its steps.
SCRIPT_PROGRESS_KEYS = ("iterations_done",)
CATALOG_PROGRESS_KEYS = ("iteration", "iterations_done", "iterations", "resumed_from", "iterations_this_run")


def progress_values(values: dict[str, Any], first: int, script: bool) -> tuple[dict[str, Any], int]:
    """``(the job's own figures, iterations done)`` from a ``metric`` message's ``values``. The figures are
    what a script reported with ``zico.log`` (``script``), or a catalog workload's loss and accuracy, without
    the bookkeeping names above and the platform's own (``zico_contracts.jobmetrics``, which ``zico.log``
    refuses: a job process that sends one anyway does not get it charted); iterations done is a script's ``iterations_done``, a catalog job's
    ``iteration`` (else ``first`` plus its steps this run, ``iterations_done``), else ``first`` (the iteration
    the run started from)."""
    if script:
        done = values.get("iterations_done")
    elif "iteration" in values:
        done = values["iteration"]
    else:
        done = first + values["iterations_done"] if "iterations_done" in values else None
    drop = SCRIPT_PROGRESS_KEYS if script else CATALOG_PROGRESS_KEYS
    figures = {k: v for k, v in values.items() if k not in drop and k not in jobmetrics.PLATFORM_METRICS}
    return figures, int(done) if done is not None else first


def _send_profile(rt: DeviceRuntime, spec: RunSpec, dirs, msg: dict[str, Any]) -> None:
    """On the job's ``profiled``: send its curve (``profile_done`` with the placement) and gate the job with it;
    an unusable trace is sent as the profile's error (the web side fails the job and stops the run)."""
    try:
        curve = profiled_curve(dirs, spec.job, spec.profile["warmup"], rt.torch_device,
                               {"command": list(spec.code.command), "code_sha256": spec.code.code_sha256},
                               msg.get("peak_reserved"), msg.get("iterations"), msg.get("profile_s"))
        rt.agent.set_curve(spec.job, curve)
    except (ValueError, KeyError) as exc:  # CurveError is a ValueError
        log.warning("job %s: no curve from its profile: %s", spec.job, escape_controls(str(exc)))
        rt.link.emit("profile_done", job=spec.job, placement=spec.placement, error=neutral_paths(str(exc))[:1500])
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
            catalog = spec.code is None
            if msg.get("iterations_total") and not catalog:  # a script's own count (zico.set_iterations_total)
                self.iterations = int(msg["iterations_total"])
            if catalog and "resumed_from" in msg["values"]:  # the catalog project's checkpoint and total
                self.first = int(msg["values"]["resumed_from"])
                self.iterations = int(msg["values"].get("iterations") or self.iterations)
                if self.first:
                    log.info("job %s resumes from its checkpoint after iteration %d", spec.job, self.first - 1)
            values, done = progress_values(msg["values"], self.first, spec.code is not None)
            elapsed = time.monotonic() - self.t0
            self.link.emit("job_progress", job=spec.job, placement=spec.placement, iteration=done,
                           iterations=self.iterations, values=values,
                           iterations_per_s=round((done - self.first) / elapsed, 4) if elapsed > 0 else None)
            _report_delays(self.link, spec, done - 1, self.delays.report())
