"""The two baseline arms of the job-overhead benchmark, each run as its own process by :mod:`.job_overhead`.

    python -m tools.bench.overhead_arms --spec '{"arm": "plain", "workload": "tiny-lm", "params": {...}, ...}'

* ``plain`` (arm B): the catalog job's training loop in the main thread of a process that never imports the
  allocator: torch's own CPU (or CUDA caching) allocator, no agent, no gate, no marks.
* ``inprocess`` (arm C): the device worker's in-process model, as ``workers/runner.py`` runs a job: the process
  installs the shared allocator (``install_cpu`` / ``install_cuda``) and the device budget, the job's loop runs
  in a thread of its own bound to the job (on CUDA with its own stream), each iteration passes the
  coordinator's gate (``workers.gate.Gate``) and sends its marks to the allocator and the gate, and a reporter
  thread reads the job's ``memory_stats`` at 5 Hz and re-anchors the gate from them.

Protocol (one JSON object per line): the process prints ``{"ready": true, "pid": N}`` once the job is built, then
for every ``run N`` line on stdin runs the next N iterations and prints ``{"ends": [[t, cpu_ns, wait_ns], ...]}``
read right after each iteration returned (its loss read back: on CUDA a device sync): ``time.perf_counter()`` (s)
and the training thread's time on a CPU and waiting for one (ns, :mod:`.schedstat`). ``exit`` ends it. Any error
ends it with status 1 and the traceback on stderr.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import sys
import threading
import time
from types import SimpleNamespace
from typing import Any

from .schedstat import current_thread_ns

REPORT_EVERY_S = 0.2  # the device worker's reporter rate (workers.reporter.SAMPLE_INTERVAL_S)


def _say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def _commands(out: "queue.Queue[int | None]") -> None:
    for line in sys.stdin:
        word, _, n = line.strip().partition(" ")
        if word == "run":
            out.put(int(n))
        elif word == "exit":
            break
    out.put(None)


def _rounds(job, commands: "queue.Queue[int | None]", before=lambda i: None, marks=None) -> None:
    i = 0
    while (n := commands.get()) is not None:
        ends = []
        for _ in range(n):
            before(i)
            job.run_iteration(i, marks)
            ends.append([time.perf_counter(), *current_thread_ns()])
            i += 1
        _say(ends=ends)


def run_plain(spec: dict[str, Any], commands) -> None:
    """Arm B: no allocator of ours anywhere in this process."""
    from zico_workloads.catalog import validate_params
    from zico_workloads.models import preload_data
    from zico_workloads.training import create_training_job

    preload_data(validate_params(spec["workload"], spec["params"]), spec.get("data_dir"))
    job = create_training_job(spec["workload"], spec["params"], device=spec["device"], data_dir=spec.get("data_dir"))
    _say(ready=True, pid=os.getpid())
    _rounds(job, commands)


class _Marks:
    """The runner's marks: to the allocator (``zico_allocator.mark``) and to the coordinator's gate."""

    def __init__(self, za, gate, job_id: int):
        self.za, self.gate, self.job_id = za, gate, job_id
        self.iteration, self.phase_name = -1, "setup"

    def iteration_start(self, i: int) -> None:
        self.iteration = i
        self.za.mark(self.job_id, "iteration_start", i)
        self.gate.progress(self.job_id, "iteration_start", i)

    def phase(self, name: str) -> None:
        self.phase_name = name
        self.za.mark(self.job_id, name, self.iteration)
        self.gate.progress(self.job_id, name, self.iteration)

    def iteration_end(self, i: int) -> None:
        self.phase_name = "done"
        self.za.mark(self.job_id, "iteration_end", i)
        self.gate.progress(self.job_id, "iteration_end", i)


def run_inprocess(spec: dict[str, Any], commands) -> None:
    """Arm C: the shared allocator installed in this process, the job in a bound thread, gated, reported."""
    import zico_allocator as za

    device, job_id = spec["device"], int(spec["job"])
    if device.startswith("cuda"):
        adev: Any = int(device.partition(":")[2] or 0)
        za.install_cuda(adev)
    else:
        adev = "cpu"
        za.install_cpu(spec.get("capacity_bytes"))
    za.set_budget(int(spec["budget_bytes"]), device=adev)
    import torch
    from placement.coordinator import Coordinator
    from placement.gating import DEFAULT_GATE_HEADROOM, gate_share

    from workers.gate import Gate
    from zico_workloads.catalog import validate_params
    from zico_workloads.models import preload_data
    from zico_workloads.training import create_training_job

    coordinator = Coordinator(gate_share(DEFAULT_GATE_HEADROOM) * int(spec["budget_bytes"]))
    gate = Gate(SimpleNamespace(coordinator=coordinator, link=SimpleNamespace(stop_requested=lambda _j, _p: None)),
                SimpleNamespace(job=job_id, placement=None, curve=spec["curve"]))
    marks = _Marks(za, gate, job_id)
    preload_data(validate_params(spec["workload"], spec["params"]), spec.get("data_dir"))
    stop = threading.Event()

    def report() -> None:  # the reporter thread of workers.reporter, for this one job
        while not stop.wait(REPORT_EVERY_S):
            st = za.memory_stats(job=job_id, device=adev)
            gate.observe(job_id, int(st.get("allocated_bytes.all.current", 0)), marks.phase_name)

    failure: list[BaseException] = []

    def job_thread() -> None:
        try:
            stream = torch.cuda.Stream(device=adev) if device.startswith("cuda") else None
            with (torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()), za.bind(job_id):
                job = create_training_job(spec["workload"], spec["params"], device=device,
                                          data_dir=spec.get("data_dir"))
                gate.join(job_id)
                threading.Thread(target=report, name="reporter", daemon=True).start()
                _say(ready=True, pid=os.getpid())
                _rounds(job, commands, before=lambda i: gate.wait(job_id, i), marks=marks)
        except BaseException as exc:  # reported by the main thread
            failure.append(exc)
        finally:
            stop.set()

    t = threading.Thread(target=job_thread, name=f"job-{job_id}")
    t.start()
    t.join()
    if failure:
        raise failure[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench.overhead_arms", description=__doc__.splitlines()[0])
    ap.add_argument("--spec", required=True, help="JSON: arm (plain|inprocess), workload, params, device, job, "
                                                  "budget_bytes, capacity_bytes, curve, data_dir")
    spec = json.loads(ap.parse_args(argv).spec)
    commands: "queue.Queue[int | None]" = queue.Queue()
    threading.Thread(target=_commands, args=(commands,), name="commands", daemon=True).start()
    {"plain": run_plain, "inprocess": run_inprocess}[spec["arm"]](spec, commands)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
