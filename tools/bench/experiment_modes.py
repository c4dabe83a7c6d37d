"""One group of real job processes run in one of the experiment's four modes, with its measured figures.

Every job is its own process, profiled and run as a device worker does it (tools.jobpath: the catalog project
under the job process entry, in its sandbox where the host has one) under a :class:`workers.agent.DeviceAgent`,
its memory from the agent pool (memfd chunks on CPU). The modes differ only in the limit and in who decides when
an iteration may start:

* ``sequential`` (a): each job alone, one after the other, under a hard limit equal to the budget.
* ``uncoordinated`` (b): all at once, no coordinator, each job's allocator client caching for itself (in place
  of torch's own allocator, so that the limit counts the bytes the budget is about). The pool's capacity is the
  budget and a request never
  waits for room (``AgentPool.set_wait(0)``), so memory past the budget is refused at once and the job fails
  with torch's ``OutOfMemoryError``: a real failure, as on a GPU whose memory is the budget. (A cgroup limit
  was not used: it would count every process's interpreter and torch, not the bytes the budget is about,
  and on a shared machine its OOM killer is not ours to set off.)
* ``slicing`` (c): one iteration in flight at a time, round robin (:class:`ExperimentAgent`, the live form of
  ``placement.device_sim.TimeSlicingGate``); the waiting job is *yielding*, so the running one may take its
  cache back (the same pool, budget and capacity as Zico's).
* ``zico`` (d): the device's coordinator (``placement.coordinator.Coordinator``) gates every iteration start,
  planning each job's curve with ``placement.gating.planning_curve`` (the agent's gate, as on the device worker)
  against ``(1 - gate_headroom) x budget`` (Note [One planning rule] in placement.gating); the agent pool
  enforces the budget.

In every concurrent mode the jobs' first iterations are held until every job of the group is ready (startup,
imports and data are not what the modes are compared on), and the makespan runs from that release to the
last iteration's end; for ``sequential`` it is the sum of the jobs' own such spans.
"""
from __future__ import annotations

import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from placement.gating import DEFAULT_GATE_HEADROOM, gate_share
from workers.agent import DeviceAgent

MODES = ("sequential", "uncoordinated", "slicing", "zico")
OOM_WORDS = ("OutOfMemoryError", "out of memory", "agent refused")


class ExperimentAgent(DeviceAgent):
    """A device agent that holds each job's first iteration until the whole group is ready and, with
    ``slicing``, lets one iteration run at a time, round robin. ``expect(ids)`` names the group of the next
    run; :meth:`ended` is called once a job's process has ended (its turn and its place in line are freed)."""

    def __init__(self, *args, slicing: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.slicing = slicing
        self._cond = threading.Condition()
        self._members: set[int] = set()
        self._arrived: set[int] = set()
        self._gone: set[int] = set()  # jobs of the group whose process ended (not DeviceAgent._ended)
        self.released_at: float | None = None  # time.monotonic() when the group's first iterations went
        self._line: list[int] = []
        self._busy: int | None = None

    def expect(self, job_ids) -> None:
        with self._cond:
            self._members, self._arrived, self._gone = set(job_ids), set(), set()
            self.released_at, self._line, self._busy = None, [], None

    def ended(self, job_id: int) -> None:
        with self._cond:
            self._gone.add(job_id)
            if job_id in self._line:
                self._line.remove(job_id)
            if self._busy == job_id:
                self._busy = None
            self._cond.notify_all()

    def _begin(self, run, proc, iteration: int) -> None:
        run.in_gate = True  # held, not hung
        with self._cond:
            self._arrived.add(run.job_id)
            if self.slicing and run.job_id not in self._line:
                self._line.append(run.job_id)  # in line from its first arrival: the turns alternate from the start
            self._cond.wait_for(lambda: self._members <= self._arrived | self._gone)
            if self.released_at is None:
                self.released_at = time.monotonic()
            self._cond.notify_all()
        if self.slicing:
            t0 = time.monotonic()
            self.pool.set_yielding(run.job_id, True)  # its cache may serve the iteration in flight
            try:
                with self._cond:
                    if run.job_id not in self._line:
                        self._line.append(run.job_id)
                    self._cond.wait_for(lambda: self._busy is None and self._line[0] == run.job_id)
                    self._line.pop(0)
                    self._busy = run.job_id
            finally:
                self.pool.set_yielding(run.job_id, False)
            waited = time.monotonic() - t0
            if iteration > 0 or waited > 0:
                run.delay_s += waited
                run.delays += waited > 1e-3
        super()._begin(run, proc, iteration)

    def _on_message(self, run, proc, msg) -> None:
        super()._on_message(run, proc, msg)
        if self.slicing and msg["type"] in ("iteration_end", "done"):
            with self._cond:
                if self._busy == run.job_id:
                    self._busy = None
                    self._cond.notify_all()


@dataclass
class Job:
    """One job of a group: catalog ``key`` and ``params`` (``iterations`` added by the runner), its label; or,
    with ``code_dir``, a user's script project run with ``argv`` plus ``--steps <iterations>``."""

    key: str
    params: dict[str, Any]
    label: str = ""
    code_dir: str | None = None
    argv: tuple[str, ...] = ()

    def __post_init__(self):
        self.label = self.label or self.key


@dataclass
class Timeline:
    """A job's iteration times seen by the agent (``time.monotonic()`` seconds): each ``go`` and each end."""

    go: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)

    def on_message(self, msg: dict[str, Any]) -> None:
        if msg["type"] == "go":
            self.go.append(time.monotonic())
        elif msg["type"] == "iteration_end":
            self.ends.append(time.monotonic())

    def durations(self, until: float | None = None, skip_first: bool = True) -> list[float]:
        """Each iteration's own time (its end less its ``go``, gate waits excluded), seconds; the first
        (warm-up) left out with ``skip_first``; only iterations that ended by ``until`` when given."""
        out = [e - g for g, e in zip(self.go, self.ends) if until is None or e <= until]
        return out[1:] if skip_first else out


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def is_oom(reason: str) -> bool:
    return any(w in (reason or "") for w in OOM_WORDS)


def profile(job: Job, device: str, capacity: int, warmup: int = 1, steady: int = 3, job_id: int = 1,
            settings=None, slots: int | None = None) -> dict[str, Any]:
    """Profile ``job`` alone as a device worker profiles it (tools.jobpath), in a pool of ``capacity`` bytes:
    ``{"curve": dict, "reserved_peak_bytes"}``, the latter the most chunks the pool granted it (what a limit on
    the pool must hold); ``slots``: its CPU slot's cores and threads, as run_mode's. Raises RuntimeError with the
    job's reason when the profile run fails."""
    from tools import jobpath

    agent = DeviceAgent(device, capacity if device == "cpu" else None, capacity, None, settings, slots=slots)
    work = Path(tempfile.mkdtemp(prefix="zico-experiment-"))
    try:
        curve, _ = jobpath.profile(jobpath.runtime(agent, work), job_id, job.key, job.params, warmup, steady)
        peak = int(agent.pool.stats()["peak_reserved"])
    except jobpath.JobPathError as exc:
        raise RuntimeError(f"profiling {job.label} failed: {exc.reason}") from None
    finally:
        agent.close()
        shutil.rmtree(work, ignore_errors=True)
    return {"curve": curve.to_dict(), "reserved_peak_bytes": max(peak, int(curve.peak_bytes))}


def run_mode(mode: str, jobs: list[Job], budget: int, device: str = "cpu", iterations: int = 8,
             curves: list[dict[str, Any]] | None = None, capacity: int | None = None,
             gate_headroom: float = DEFAULT_GATE_HEADROOM, settings=None, slots: int | None = None) -> dict[str, Any]:
    """Run ``jobs`` in ``mode`` (one of MODES) under ``budget`` bytes; returns the run's figures.

    ``curves`` (the jobs' memory curves as dicts) are needed for ``zico``; ``capacity`` is the pool's for
    ``slicing`` and ``zico`` (default: the budget; ``sequential`` and ``uncoordinated`` always use the budget).
    Returns ``{"mode", "budget_bytes", "capacity_bytes", "makespan_s", "peak_bytes", "over_budget_bytes",
    "budget_violations", "oom_failures", "failures", "gate_delay_s", "jobs": [...]}``; each job:
    ``{"label", "status", "reason", "oom", "iterations", "delay_s", "durations_s", "step_s", "span_s",
    "compute_share"}`` (``step_s``: median iteration time, warm-up excluded; ``compute_share``: the share the
    agent's meter measured in this run, or None). ``makespan_s`` is None when a job failed. ``slots``: a CPU
    device's slots, each job its slot's cores and threads (zico_contracts.cpushare); None: the process's threads.
    Raises ValueError for an unknown mode, or ``zico`` without curves.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "zico" and (curves is None or len(curves) != len(jobs)):
        raise ValueError("mode zico needs one memory curve per job")
    from placement.coordinator import Coordinator
    from tools import jobpath

    hard = mode in ("sequential", "uncoordinated")
    cap = budget if hard or capacity is None else max(budget, capacity)
    coordinator = Coordinator(gate_share(gate_headroom) * budget) if mode == "zico" else None
    agent = ExperimentAgent(device, cap if device == "cpu" else None, budget, coordinator, settings,
                            slicing=mode == "slicing", slots=slots)
    if hard and agent.pool.native is not None:
        agent.pool.native.set_wait(0)  # Note: no waiting for room, past the budget is refused at once
    work = Path(tempfile.mkdtemp(prefix="zico-experiment-"))
    rt = jobpath.runtime(agent, work)
    lines = [Timeline() for _ in jobs]
    outs: list[dict[str, Any] | None] = [None] * len(jobs)
    spans: list[float | None] = [None] * len(jobs)

    def one(n: int) -> None:
        job_id = n + 1
        curve = None if curves is None else curves[n]
        try:
            if jobs[n].code_dir:
                outs[n] = jobpath.run_script(rt, job_id, jobs[n].code_dir, [*jobs[n].argv, "--steps", str(iterations)],
                                             curve, on_message=lines[n].on_message)
            else:
                outs[n] = jobpath.run(rt, job_id, jobs[n].key, {**jobs[n].params, "iterations": iterations}, curve,
                                      on_message=lines[n].on_message)
        except Exception as exc:  # not launched: reported, never hidden
            outs[n] = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}", "metrics": {}}
        finally:
            agent.ended(job_id)

    try:
        if mode == "sequential":
            for n in range(len(jobs)):
                agent.expect([n + 1])
                one(n)
                if agent.released_at is not None and lines[n].ends:
                    spans[n] = lines[n].ends[-1] - agent.released_at
        else:
            agent.expect(range(1, len(jobs) + 1))
            threads = [threading.Thread(target=one, args=(n,), name=f"{mode}-job-{n + 1}") for n in range(len(jobs))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for n in range(len(jobs)):
                if agent.released_at is not None and lines[n].ends:
                    spans[n] = lines[n].ends[-1] - agent.released_at
        native = agent.pool.native.stats()["pool"] if agent.pool.native is not None else {}
        peak = int(agent.pool.stats()["peak_reserved"])
    finally:
        agent.close()
        shutil.rmtree(work, ignore_errors=True)
    results = []
    for n, (job, out, line) in enumerate(zip(jobs, outs, lines)):
        ok = out["status"] == "succeeded"
        durations = line.durations()
        results.append({"label": job.label, "status": out["status"], "reason": "" if ok else out.get("reason", ""),
                        "oom": (not ok) and is_oom(out.get("reason", "")), "iterations": len(line.ends),
                        "delay_s": float(out.get("metrics", {}).get("delay_s", 0.0)), "durations_s": durations,
                        "step_s": median(durations), "span_s": spans[n],
                        "ends": list(line.ends), "go": list(line.go),
                        # the device agent's own measurement (zico_contracts.computeshare), None when it had too little
                        "compute_share": out.get("metrics", {}).get("compute_share")})
    failed = [r for r in results if r["status"] != "succeeded"]
    if failed or any(s is None for s in spans):
        makespan = None
    else:
        makespan = sum(spans) if mode == "sequential" else max(spans)
    over = max(0, peak - budget)
    return {"mode": mode, "budget_bytes": int(budget), "capacity_bytes": int(cap), "makespan_s": makespan,
            "peak_bytes": peak, "over_budget_bytes": over,
            "budget_violations": int(native.get("deadlock_grants", 0)) + (1 if over and not native else 0),
            "oom_failures": sum(r["oom"] for r in results), "failures": len(failed),
            "gate_delay_s": sum(r["delay_s"] for r in results), "jobs": results}


def colocated_slowdowns(run: dict[str, Any], solo_step_s: list[float]) -> list[float | None]:
    """Per job: its median iteration time while every job of ``run`` still iterated, over its solo median
    step (``solo_step_s``, seconds). None where a job had no such iteration (or failed)."""
    ends = [j["ends"][-1] for j in run["jobs"] if j["ends"]]
    if len(ends) < len(run["jobs"]):
        return [None] * len(run["jobs"])
    until = min(ends)
    out = []
    for j, solo in zip(run["jobs"], solo_step_s):
        d = [e - g for g, e in zip(j["go"], j["ends"]) if e <= until][1:]
        out.append(None if not d or not solo or j["status"] != "succeeded" else statistics.median(d) / solo)
    return out
