"""The device worker's job path for the tools that measure Zico (colocate, the real-run experiment, the GPU check,
the slowdown table).

A catalog job is profiled and run here exactly as a device worker does it: the built-in catalog project under
the job process entry (``workers.job.entry``), in its sandbox where the host has one, else the same process
unwrapped (Note [No sandbox for Zico's own code] in workers.agent.sandbox); its curve is its profile run's
allocator trace (``workers.profiling.catalog_profile``), stored with the held peak as a profile is; its run
spec is ``workers.runner.catalog_script_spec``'s. A user's script project runs as a job with code does
(:func:`run_script`). Only the device agent is the tool's own (it may hold a group's
first iterations, or slice time: tools.bench.experiment_modes), and nothing here talks to Redis or the web side.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from placement.curves import MemoryCurve, curve_from_dict
from workers import jobdisk
from workers.agent import JobRun
from workers.device import DeviceRuntime, WorkerConfig
from workers.nvml import DeviceInfo
from workers.profiling import catalog_profile
from workers.runner import catalog_script_spec
from zico_contracts.specs import ProfileSpec, RunSpec


class JobPathError(RuntimeError):
    """A catalog job's profile run failed; the message is the agent's reason."""

    def __init__(self, reason: str, outcome: dict[str, Any]):
        super().__init__(reason)
        self.reason, self.outcome = reason, outcome


def runtime(agent, work_dir: str | Path, data_dir: str | Path | None = None) -> DeviceRuntime:
    """A device runtime around the tool's ``agent`` (a workers.agent.DeviceAgent): checkpoints and job
    directories under ``work_dir``, data under ``data_dir`` (default ``work_dir/data``), no checkpoints
    during a run and no link to Redis."""
    work = Path(work_dir)
    kind, index = ("cpu", 0) if agent.device == "cpu" else ("gpu", int(agent.device.partition(":")[2] or 0))
    total = int(agent.capacity_bytes or agent.budget_bytes)
    config = WorkerConfig(kind, "tool", index, 1, agent.capacity_bytes, agent.budget_bytes, "",
                          work / "checkpoints", Path(data_dir) if data_dir else work / "data",
                          checkpoint_every_s=0, var_dir=work / "var")
    return DeviceRuntime(config, DeviceInfo(kind, index, agent.device, "", total), agent, None)


def profile(rt: DeviceRuntime, job_id: int, key: str, params: dict[str, Any], warmup: int = 1,
            steady: int = 3, time_limit_s: float | None = None) -> tuple[MemoryCurve, dict[str, Any]]:
    """Profile catalog job ``key`` with ``params`` as ``profile_job`` does on a device worker: ``(its curve,
    the agent's outcome)``; the curve's ``meta["held_peak_bytes"]`` is the bytes its pool held at most, the
    outcome's ``metrics`` the run's figures (``peak_reserved_bytes``, ``run_s``, ...). Raises JobPathError
    when the run failed or left no usable trace; ValueError (ParamsError, UnknownWorkload) for bad params."""
    fields = {"warmup": warmup, "steady": steady, "time_limit_s": time_limit_s}
    spec = ProfileSpec.from_dict(job_id, {"workload": key, "params": params, "warmup": warmup, "steady": steady,
                                          **({"time_limit_s": time_limit_s} if time_limit_s else {})})
    out = catalog_profile(rt, spec, fields)
    if out["status"] != "succeeded" or "curve" not in out:
        raise JobPathError(out.get("reason") or f"the profile run ended {out['status']}", out)
    return curve_from_dict(out["curve"]), out


def run_script(rt: DeviceRuntime, job_id: int, code_dir: str | Path, argv: list[str],
               curve: dict[str, Any] | None = None, on_message: Callable[[dict[str, Any]], None] = lambda msg: None,
               **job_run: Any) -> dict[str, Any]:
    """Run a user's script project (the folder ``code_dir``, as a code archive unpacks) with ``argv`` as
    ``run_job`` runs a job with code: the same run directories (``workers.usercode.run_dirs``), the same job
    process spec, in its sandbox; gated with ``curve`` (None: ungated). Blocks until its process ended and
    returns the agent's outcome. Raises RuntimeError when the job already runs on the agent."""
    from workers import usercode

    var_dir = Path(rt.config.var_dir or rt.config.checkpoint_dir.parent)
    dirs = usercode.run_dirs(Path(code_dir), job_id, var_dir, jobdisk.of_runtime(rt))
    data_dir = Path(rt.config.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    spec = {"kind": "script", "code_dir": str(dirs.code_dir), "argv": list(argv), "env": {},
            "device": rt.torch_device, "output_dir": str(dirs.output_dir), "scratch_dir": str(dirs.scratch_dir),
            "data_dir": str(data_dir)}
    try:
        return rt.agent.run(JobRun(job_id, spec, curve=curve, on_message=on_message, **job_run))
    finally:
        jobdisk.remove_run_dir(dirs.scratch_dir.parent, jobdisk.of_runtime(rt))


def run(rt: DeviceRuntime, job_id: int, key: str, params: dict[str, Any], curve: dict[str, Any] | None = None,
        on_message: Callable[[dict[str, Any]], None] = lambda msg: None, **job_run: Any) -> dict[str, Any]:
    """Run catalog job ``key`` with ``params`` (``iterations`` among them) as ``run_job`` does, gated with
    ``curve`` (a memory curve's dict; None: ungated); blocks until its process ended and returns the agent's outcome (``status``, ``reason``,
    ``metrics``, ``pid``). ``job_run``: more JobRun fields (``budget_bytes``, ...). Raises ValueError for bad
    params, RuntimeError when the job already runs on the agent."""
    dirs, spec = catalog_script_spec(rt, RunSpec.from_dict(job_id, {"workload": key, "params": params}))
    try:
        return rt.agent.run(JobRun(job_id, spec, curve=curve, on_message=on_message, **job_run))
    finally:
        jobdisk.remove_run_dir(dirs.scratch_dir.parent, jobdisk.of_runtime(rt))
