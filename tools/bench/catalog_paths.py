"""What running a catalog job by the user-script path costs: start-up and one step, sandbox vs ``workers.jobproc``.

    python -m tools.bench.catalog_paths [--job digits-cnn:batch_size=32 ...] [--rounds 4] [--steps 12]
        [--device cpu] [--threads 1]

Two arms, each a whole job run under one :class:`workers.agent.DeviceAgent` in this process, ungated (no curve):

* **A** ``workers.jobproc``: the catalog job in one unsandboxed process;
* **B** the script path: ``workers.job.entry`` running the built-in catalog project in the job's bubblewrap
  sandbox (``workers.runner.catalog_script_spec``), as the worker's tasks run catalog jobs.

Runs alternate A B A B ... (``--rounds`` of each, per workload), so machine load falls on both alike. Per run:
**start-up**, launch to the first ``iteration_begin`` (interpreter, torch, the workload built, the data loaded;
in B also bwrap and the sandbox's mounts), and **step**, the median time between consecutive ``iteration_end``
messages past the first (each iteration's gate round trip included); and the job process's CPU seconds (user +
sys) up to its last iteration. Printed per workload: each arm's median of the runs' figures and the ratios B/A. Figures
are only compared within one run. Needs bubblewrap (the agent's sandbox) and, for B, root or user namespaces.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from workers.agent import AgentSettings, DeviceAgent, JobRun

DEFAULT_JOBS = ["digits-cnn:batch_size=32", "tiny-lm:batch_size=8,seq_len=64,data=synthetic"]
ARMS = {"A": "jobproc", "B": "script"}


def parse_job(text: str) -> tuple[str, dict[str, Any]]:
    """``"tiny-lm:batch_size=8,data=synthetic"`` -> ``("tiny-lm", {"batch_size": 8, "data": "synthetic"})``."""
    key, _, rest = text.partition(":")
    params: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        name, _, value = item.partition("=")
        params[name] = int(value) if value.lstrip("-").isdigit() else value
    return key, params


def job_spec(arm: str, key: str, params: dict[str, Any], job_id: int, work: Path, device: str) -> dict[str, Any]:
    """The agent's spec of the job by ``arm``'s path, as the worker's ``run_job`` builds it (no checkpoints)."""
    from workers.runner import catalog_script_spec

    rt = SimpleNamespace(torch_device=device, config=SimpleNamespace(
        data_dir=work / "data", checkpoint_dir=work / "ckpt", var_dir=work / "var", checkpoint_every_s=None))
    spec = SimpleNamespace(job=job_id, workload=key, params=params, job_created_at=None)
    if arm == "B":
        return catalog_script_spec(rt, spec)[1]
    return {"workload": key, "params": params, "device": device, "checkpoint_dir": str(work / "ckpt"),
            "data_dir": str(work / "data"), "checkpoint_every_s": None, "job_created_at": None}


def one_run(agent: DeviceAgent, arm: str, key: str, params: dict[str, Any], job_id: int, work: Path) -> dict:
    """Run one job to its end by ``arm``'s path; returns ``startup_s``, ``step_s``, ``cpu_s``, ``status``."""
    spec = job_spec(arm, key, params, job_id, work, agent.device)
    events: list[tuple[str, float]] = []
    cpu: dict[str, float] = {}

    def on_message(msg: dict[str, Any]) -> None:
        if msg["type"] in ("iteration_begin", "iteration_end"):
            events.append((msg["type"], time.monotonic()))
        if msg["type"] == "iteration_end" and run.job_pid:
            cpu["last"] = _cpu_s(run.job_pid) or cpu.get("last", 0.0)

    run = JobRun(job_id, spec, on_message=on_message)
    t0 = time.monotonic()
    out = agent.run(run)
    begins = [t for kind, t in events if kind == "iteration_begin"]
    ends = [t for kind, t in events if kind == "iteration_end"]
    steps = [b - a for a, b in zip(ends[1:], ends[2:])]
    return {"status": out["status"], "reason": out.get("reason", "")[:300],
            "startup_s": begins[0] - t0 if begins else None,
            "step_s": statistics.median(steps) if steps else None, "cpu_s": cpu.get("last")}


def _cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` so far (``/proc/<pid>/stat``), None when gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def measure(key: str, params: dict[str, Any], rounds: int, steps: int, device: str) -> dict[str, list[dict]]:
    """``rounds`` runs of each arm, alternating A B A B; returns each arm's run records."""
    params = {**params, "iterations": steps}
    work = Path(tempfile.mkdtemp(prefix="zico-catalog-paths-"))
    agent = DeviceAgent(device, 2 << 30, 2 << 30, None, AgentSettings.from_env())
    records: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    try:
        job_id = 1
        for r in range(rounds):
            for arm in (ARMS if r % 2 == 0 else list(ARMS)[::-1]):
                rec = one_run(agent, arm, key, params, job_id, work)
                job_id += 1
                if rec["status"] != "succeeded":
                    raise RuntimeError(f"{key} by {ARMS[arm]}: {rec['status']}: {rec['reason']}")
                records[arm].append(rec)
    finally:
        agent.close()
        shutil.rmtree(work, ignore_errors=True)
    return records


def report(key: str, records: dict[str, list[dict]]) -> tuple[list[str], dict[str, Any]]:
    """Lines to print and the figures: per arm the medians over its runs, then B/A."""
    figures: dict[str, Any] = {}
    lines = [f"{key}: {len(records['A'])} runs per arm, alternating"]
    for arm, name in ARMS.items():
        med = {f: statistics.median(r[f] for r in records[arm] if r[f] is not None) for f in ("startup_s", "step_s",
                                                                                             "cpu_s")}
        figures[arm] = med
        lines.append(f"  {arm} {name:8s} start-up {med['startup_s']:.3f} s  step {med['step_s'] * 1e3:.2f} ms  "
                     f"process CPU {med['cpu_s']:.2f} s")
    ratio = {f: figures["B"][f] / figures["A"][f] for f in ("startup_s", "step_s", "cpu_s")}
    figures["B/A"] = ratio
    lines.append(f"  B/A start-up {ratio['startup_s']:.3f}  step {ratio['step_s']:.3f}  "
                 f"process CPU {ratio['cpu_s']:.3f}")
    return lines, figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench.catalog_paths", description=__doc__.split("\n")[0])
    ap.add_argument("--job", action="append", help="workload:param=value,... (repeatable)")
    ap.add_argument("--rounds", type=int, default=4, help="runs of each arm per workload (4)")
    ap.add_argument("--steps", type=int, default=12, help="iterations per run (12)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of both arms' jobs (0: torch's)")
    ap.add_argument("--json", help="write the figures here as JSON")
    a = ap.parse_args(argv)
    if a.threads > 0:  # A inherits this process's environment; B gets it passed on (workers.runner.PASSED_ENV)
        os.environ.update(OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads))
    out: dict[str, Any] = {}
    for text in a.job or DEFAULT_JOBS:
        key, params = parse_job(text)
        lines, out[text] = report(key, measure(key, params, a.rounds, a.steps, a.device))
        print("\n".join(lines), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
