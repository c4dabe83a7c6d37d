"""The job process: one training job in its own OS process, launched and watched by the device agent.

    python -m workers.jobproc --spec '{"job": 7, "workload": "digits-cnn", "params": {...}, ...}'

(the agent passes the control socket's fd in ``ZICO_CONTROL_FD`` and, with the agent pool, the allocator
client's fd in ``ZICO_AGENT_FD``; see :mod:`workers.agent.launch`). In order:

1. die with the agent (``PR_SET_PDEATHSIG``), open the control socket, install the allocator client before
   torch allocates anything (the agent's pool when ``ZICO_AGENT_FD`` is set, else a pool of this process
   bounded by the spec's budget), send ``hello``;
2. preload the data set, build the catalog job, resume from its checkpoint (as ``workers.runner`` did), send
   ``ready``;
3. per iteration: a gate round trip (``iteration_begin`` -> ``go`` or ``stop``) at its start, phase marks,
   ``iteration_end`` from torch's global optimizer step hook (Note [Iterations from optimizer steps]), a
   checkpoint every few seconds, ``metric`` once a second; a stats thread sends ``stats`` at 5 Hz;
4. ``done`` with the status and metrics. A stop (``stop`` message, SIGTERM, or the agent closing the
   socket) checkpoints and ends ``cancelled`` / ``aborted``. Any exception ends ``failed`` with its message.

(Note [Allocator before CUDA, and never in a forked child] in :mod:`workers.job.control`.)

A spec with ``"profile": {"warmup", "steady"[, "time_limit_s"]}`` is a *profile run* instead (the body of
``zico.device.profile_job``): the job's first iterations through the same allocator client, ungated, turned
into its memory curve (``workers.curves.capture.profile_curve``), which ``done`` carries.
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from typing import Any

from zico_contracts.oom import describe_oom
from zico_contracts import agent as proto

from .job.control import (AgentLogHandler, Control, Stopped, die_with_parent, install_allocator, last_oom,
                          plain)

STATS_INTERVAL_S = 0.2
METRIC_EVERY_S = 1.0


class Progress:
    """The catalog loop's marks (``zico_workloads.training.Marks``) sent to the agent.

    Note [Iterations from optimizer steps]
        An iteration ends where the optimizer steps: a global post-hook on every torch optimizer
        (``torch.optim.optimizer.register_optimizer_step_post_hook``) sends ``iteration_end``, so the end is
        found without the training code saying so; with gradient accumulation, the step after N micro-batches
        counts once. The start is the gate round trip, which must precede the iteration's allocations.
    """

    def __init__(self, control: Control):
        self.control = control
        self.iteration = -1
        self.phase_name = "setup"
        self.delay_s = 0.0
        self.delays = 0
        self._t0 = 0.0
        self._marks: dict[str, float] = {}
        self._open = False

    def iteration_start(self, i: int) -> None:
        self.phase_name = "wait"
        delay = self.control.begin(i)
        self.delay_s += delay
        self.delays += delay > 0
        self.iteration, self._t0, self._marks, self._open = i, time.monotonic(), {}, True

    def phase(self, name: str) -> None:
        self.phase_name = name
        self._marks[name] = round(time.monotonic() - self._t0, 6)
        self.control.send("mark", kind=name, iteration=max(self.iteration, 0))

    def iteration_end(self, i: int) -> None:  # the loop's own mark: the step hook already ended it
        self.phase_name = "done"

    def optimizer_stepped(self, *_args) -> None:
        if self._open:
            self._open = False
            self.control.send("iteration_end", iteration=self.iteration, marks=self._marks)


def _stats_loop(control: Control, progress: Progress, za, adev, job_id: int, stop: threading.Event) -> None:
    while not stop.wait(STATS_INTERVAL_S):
        try:
            st = za.memory_stats(job=job_id, device=adev)
            control.send("stats", allocated=int(st.get("allocated_bytes.all.current", 0)),
                         reserved=int(st.get("reserved_bytes.all.current", 0)),
                         peak_allocated=int(st.get("allocated_bytes.all.peak", 0)),
                         peak_reserved=int(st.get("reserved_bytes.all.peak", 0)),
                         iteration=progress.iteration, phase=progress.phase_name)
        except OSError:
            return
        except Exception:  # stats are best effort; training goes on
            continue


def train(spec: dict[str, Any], control: Control) -> dict[str, Any]:
    """Build, resume and train the job; returns the ``done`` fields (status, metrics[, reason])."""
    za, adev = install_allocator(spec)
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from workers.job import checkpoints
    from zico_workloads.catalog import validate_params
    from zico_workloads.models import preload_data
    from zico_workloads.training import create_training_job

    job_id, device = spec["job"], spec["device"]
    control.send("hello", version=proto.PROTOCOL_VERSION, job_id=job_id, pid=os.getpid())
    preload_data(validate_params(spec["workload"], spec["params"]), spec.get("data_dir"))  # outside the binding
    stream = torch.cuda.Stream(device=device) if device.startswith("cuda") else None
    progress = Progress(control)
    stats_stop = threading.Event()
    with (torch.cuda.stream(stream) if stream is not None else _Null()), za.bind(job_id):
        job = create_training_job(spec["workload"], spec["params"], device=device, data_dir=spec.get("data_dir"))
        ckpt = checkpoints.load(spec["checkpoint_dir"], job_id, spec.get("job_created_at"))
        first, prior_s = 0, 0.0
        if ckpt is not None:
            job.load_state_dict(ckpt["state"])
            first, prior_s = job.iterations_done, float(ckpt.get("train_s", 0.0))
        register_optimizer_step_post_hook(progress.optimizer_stepped)
        threading.Thread(target=_stats_loop, args=(control, progress, za, adev, job_id, stats_stop),
                         name="zico-stats", daemon=True).start()
        control.send("ready", resumed_from=first, iterations=job.iterations)
        every = float(spec.get("checkpoint_every_s") or "inf")  # None: no periodic checkpoints
        t0 = time.monotonic()
        next_ckpt, next_metric = t0 + every, t0 + METRIC_EVERY_S
        status, i = "succeeded", first - 1
        saves = checkpoints.SaveTally()  # a failed save is counted, not fatal (workers.job.checkpoints)
        try:
            for i in range(first, job.iterations):
                job.run_iteration(i, progress)
                now = time.monotonic()
                if now >= next_ckpt and i + 1 < job.iterations:
                    progress.phase_name = "checkpoint"
                    saves.save(spec["checkpoint_dir"], job_id, i, job.state_dict(), train_s=prior_s + now - t0,
                               job_created_at=spec.get("job_created_at"))
                    next_ckpt = time.monotonic() + every
                if now >= next_metric:
                    next_metric = now + METRIC_EVERY_S
                    control.send("metric", values=plain({**job.metrics(), "iteration": i + 1}))
        except Stopped as stopped:
            status = stopped.status
            if job.iterations_done > first:  # Note: a stop keeps the work done (the agent drops it on cancel)
                saves.save(spec["checkpoint_dir"], job_id, job.iterations_done - 1, job.state_dict(),
                           train_s=prior_s + time.monotonic() - t0, job_created_at=spec.get("job_created_at"))
        if stream is not None:
            stream.synchronize()
        stats_stop.set()
        train_s = time.monotonic() - t0
        ran = job.iterations_done - first
        st = za.memory_stats(job=job_id, device=adev)
        metrics = {**plain(job.metrics()), "train_s": round(train_s, 3), "resumed_from": first,
                   "iterations_this_run": ran, "iterations_per_s": round(ran / train_s, 4) if train_s > 0 else None,
                   "gate_delay_s": round(progress.delay_s, 4), "gate_waits": progress.delays,
                   "peak_allocated_bytes": int(st.get("allocated_bytes.all.peak", 0)),
                   "peak_reserved_bytes": int(st.get("reserved_bytes.all.peak", 0)), **saves.metrics()}
    progress.phase_name = "done"
    return {"status": status, "metrics": metrics,
            **({"reason": "cancelled on request"} if status == "cancelled" else {})}


def profile(spec: dict[str, Any], control: Control) -> dict[str, Any]:
    """A profile run (Note [Profiling time limit] in workers.profiling): returns the ``done`` fields, with
    the memory curve when it succeeded, or ``failed`` with the reason it stopped."""
    za, adev = install_allocator(spec)
    from workers.curves.capture import ProfileStopped, profile_curve

    job_id, prof = spec["job"], spec["profile"]
    warmup, steady, limit = int(prof["warmup"]), int(prof["steady"]), prof.get("time_limit_s")
    control.send("hello", version=proto.PROTOCOL_VERSION, job_id=job_id, pid=os.getpid())
    control.send("ready", resumed_from=0, iterations=warmup + steady)
    progress = Progress(control)
    progress.phase_name = "forward"
    stats_stop = threading.Event()
    threading.Thread(target=_stats_loop, args=(control, progress, za, adev, job_id, stats_stop),
                     name="zico-stats", daemon=True).start()
    t0 = time.monotonic()

    def stop(done: int) -> str | None:
        progress.iteration = done
        control.send("metric", values={"iteration": done})  # progress for the watchdog and the page
        elapsed = time.monotonic() - t0
        if limit is not None and elapsed > limit:
            return (f"stopped after {elapsed:.0f} s and {done} of {warmup + steady} iterations: over the "
                    f"profiling time limit of {limit:g} s (ZICO_PROFILE_TIME_LIMIT_S)")
        if control.stop_status:
            return "cancelled on request"
        return None

    try:
        curve = profile_curve(spec["workload"], spec.get("params") or {}, device=spec["device"],
                              data_dir=spec.get("data_dir"), warmup=warmup, steady=steady, job_id=job_id, stop=stop)
    except ProfileStopped as stopped:
        return {"status": "failed", "reason": str(stopped), "metrics": {}}
    finally:
        stats_stop.set()
    return {"status": "succeeded", "metrics": {"profile_s": round(time.monotonic() - t0, 3)}, "curve": curve.to_dict()}


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main(argv: list[str] | None = None) -> int:
    """Exit status after a ``done`` message was sent: 0, or 1 when the job failed; 2 for a bad spec."""
    ap = argparse.ArgumentParser(prog="python -m workers.jobproc", description="One Zico training job process.")
    ap.add_argument("--spec", required=True, help="the job's spec as JSON (written by the device agent)")
    a = ap.parse_args(argv)
    die_with_parent()
    faulthandler.enable()  # a crash leaves its stack in the stderr tail the agent reports
    spec = json.loads(a.spec)
    from zico_contracts.cpushare import pin_from_environment

    if (unpinned := pin_from_environment()):  # the slot's cores (Note [Compute per slot]), before torch loads
        print(f"zico: {unpinned}", file=sys.stderr)
    control = Control(int(os.environ[proto.CONTROL_FD_ENV]))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")  # to stderr
    logging.getLogger().addHandler(AgentLogHandler(control))
    signal.signal(signal.SIGTERM, lambda *_: control.request_stop("cancelled"))
    try:
        done = profile(spec, control) if spec.get("profile") else train(spec, control)
    except Exception as exc:
        import traceback

        traceback.print_exc()
        reason = f"{type(exc).__name__}: {exc}"[:1500]
        oom = last_oom(spec)
        done = {"status": "failed", "reason": reason + (f" ({describe_oom(oom)})" if oom else ""), "metrics": {}}
    control.send("done", **done)
    control.sock.shutdown(socket.SHUT_WR)
    sys.stdout.flush()
    sys.stderr.flush()
    # no interpreter teardown (torch's and the allocator's atexit work is not needed); 1 after a failure, as python
    os._exit(int(done["status"] == "failed"))


if __name__ == "__main__":
    raise SystemExit(main())
