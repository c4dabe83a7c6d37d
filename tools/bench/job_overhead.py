"""What running a job as its own process costs: one training step in three arms, measured side by side.

    python -m tools.bench.job_overhead [--device cpu|cuda:N] [--job resnet18:batch_size=8,image_size=64 ...]
        [--rounds 8] [--steps 10] [--warmup-rounds 1] [--threads 1] [--out prefix]

Arms, each a process of its own that stays up for the whole run:

* **A** the job process as a device worker runs it (tools.jobpath: the catalog project under the job process
  entry, in its sandbox where the host has one) launched by a :class:`workers.agent.DeviceAgent` in this
  process, its memory from the agent pool (CPU: memfd chunks; CUDA: the agent's VMM chunks, imported and mapped
  by the job, docs/allocator.md "On a CUDA device"; only where the driver refuses VMM chunks does the job get a
  pool of its own bounded by the budget, :mod:`workers.agent.pool`; the report names which per workload), every
  iteration a gate round trip through the agent and the coordinator, its stats thread at 5 Hz.
* **B** a plain process: the same catalog training loop with torch's own allocator, no agent, no gate.
* **C** today's in-process model: the loop in a thread of a process that installed the shared allocator, bound
  to the job, gated and reported in-process (:mod:`tools.bench.overhead_arms`).

Rounds interleave the arms (A B C, then C B A, ...), each arm running ``--steps`` iterations per round while the
others wait, so machine load falls on all of them alike. A step is the time between the ends of two consecutive
iterations of one arm within a round (A: the agent receiving ``iteration_end``; B, C: the loop, after the
loss was read back), so A's steps include everything between its iterations: the gate round trip, marks,
metric messages. Excluded: the first ``--warmup-rounds`` rounds of every arm (warm-up) and the first step of
every round (it follows the other arms' turn). Printed per workload (:mod:`.overhead_report`): per arm the median
step time with its IQR; the same less the training thread's wait for a CPU (``wall-wait``: on a loaded machine
the other processes' share, which falls on the arms unevenly, taken out); the training thread's CPU time per
step; the arm's process CPU time per iteration (for A also the agent's); the step count. Then the ratios A/B
(target <= 1.03) and A/C of the medians, the same ratios per round (median and IQR over the rounds), and of the
CPU time. Figures are only compared within one run.

A is held between its turns inside the agent, before its iteration's gate (:class:`TurnAgent`): the job process
waits for ``go`` exactly as it waits out a time shift. The coordinator gets a stand-in curve (flat, a quarter of
the budget): a job alone is admitted at once, so the curve's values do not change what a decision costs.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from workers.agent import AgentSettings, DeviceAgent

from .overhead_report import ARMS
from .overhead_report import lines as report_lines
from .overhead_report import summarize
from .schedstat import process_cpu_ns, thread_ns

ROOT = Path(__file__).resolve().parents[2]
CPU_JOBS = ["resnet18:batch_size=8,image_size=64,data=synthetic", "tiny-lm:batch_size=16,seq_len=64,data=synthetic"]
CUDA_JOBS = ["resnet50:batch_size=64,image_size=224,data=synthetic",
             "gpt2-small:batch_size=8,seq_len=1024,data=synthetic"]
READY_TIMEOUT_S = 600.0
ROUND_TIMEOUT_S = 600.0


class BenchError(RuntimeError):
    """An arm failed or stopped answering; the message names it and carries its reason."""


class Turns:
    """Arm A's turns: the job may begin iteration ``i`` only once ``i < allowed``; ends are timed on arrival."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._allowed = 0
        self.ends: list[list[float]] = []
        self.closed: str | None = None
        self.pid: int | None = None  # the job process, once launched

    def allow(self, n: int) -> int:
        """Let ``n`` more iterations begin; returns how many ends there will then be."""
        with self._cond:
            self._allowed += n
            self._cond.notify_all()
            return self._allowed

    def wait_turn(self, pid: int, iteration: int) -> None:
        with self._cond:
            self.pid = pid
            self._cond.notify_all()
            self._cond.wait_for(lambda: iteration < self._allowed or self.closed is not None)

    def wait_held(self, timeout: float) -> None:
        """Until the job process is built and waits for its first turn (raises BenchError if it ended first)."""
        with self._cond:
            self._cond.wait_for(lambda: self.pid is not None or self.closed is not None, timeout)
            if self.pid is None:
                raise BenchError(f"arm A did not start ({self.closed or f'not ready within {timeout:g} s'})")

    def on_message(self, msg: dict[str, Any]) -> None:
        if msg["type"] == "iteration_end":
            t = time.perf_counter()
            cpu_wait = thread_ns(self.pid) if self.pid else None  # the job's training (main) thread
            with self._cond:
                self.ends.append([t, *(cpu_wait or (0, 0))])
                self._cond.notify_all()
        elif msg["type"] == "done":
            self.close(f"done: {msg['status']} {msg.get('reason', '')}".strip())

    def close(self, why: str) -> None:
        with self._cond:
            self.closed = self.closed or why
            self._cond.notify_all()

    def wait_ends(self, count: int, timeout: float) -> list[list[float]]:
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.ends) >= count or self.closed is not None, timeout):
                raise BenchError(f"arm A: no iteration end within {timeout:g} s")
            if len(self.ends) < count:
                raise BenchError(f"arm A ended early ({self.closed})")
            return list(self.ends)


class TurnAgent(DeviceAgent):
    """A device agent that holds its job's ``iteration_begin`` until the job's turn, then gates it as usual."""

    def __init__(self, *args, turns: Turns, **kwargs):
        super().__init__(*args, **kwargs)
        self.turns = turns

    def _begin(self, run, proc, iteration: int) -> None:
        run.in_gate = True  # a held job is waiting, not hung
        self.turns.wait_turn(run.job_pid or run.pid, iteration)  # the job's own process, inside its sandbox
        super()._begin(run, proc, iteration)


class ArmProcess:
    """Arm B or C (``python -m tools.bench.overhead_arms``): ``run(n)`` returns the n iteration ends' readings."""

    def __init__(self, arm: str, spec: dict[str, Any], env: dict[str, str]):
        self.arm = arm
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "tools.bench.overhead_arms", "--spec", json.dumps(spec)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env,
                                     text=True, cwd=ROOT)
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                self._lines.put(json.loads(line))
        self._lines.put(None)

    def _next(self, key: str, timeout: float) -> Any:
        try:
            msg = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise BenchError(f"arm {self.arm}: no answer within {timeout:g} s") from None
        if msg is None:
            self._stderr.seek(0)
            tail = self._stderr.read().decode(errors="replace").strip().splitlines()[-15:]
            raise BenchError(f"arm {self.arm} exited with code {self.proc.wait()}:\n" + "\n".join(tail))
        return msg[key]

    def ready(self) -> None:
        self._next("ready", READY_TIMEOUT_S)

    def run(self, n: int) -> list[list[float]]:
        self.proc.stdin.write(f"run {n}\n")
        self.proc.stdin.flush()
        return self._next("ends", ROUND_TIMEOUT_S)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("exit\n")
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()


def stand_in_curve(budget: int, device: str) -> dict[str, Any]:
    """A flat memory curve at a quarter of the budget (see the module's docstring)."""
    from placement.curves import MemoryCurve

    return MemoryCurve(fractions=[0.0, 0.5], bytes=[budget // 8, budget // 4], iteration_s=0.1,
                       persistent_bytes=budget // 8, source="estimate", device=device).to_dict()


def child_env(threads: int) -> dict[str, str]:
    """This process's environment with the project's import roots and the intra-op thread count (0: torch's)."""
    env = dict(os.environ)
    paths = [str(ROOT / "platform"), str(ROOT), str(ROOT / "allocator" / "python")]
    have = env.get("PYTHONPATH", "").split(os.pathsep)
    env["PYTHONPATH"] = os.pathsep.join([p for p in paths if p not in have] + [p for p in have if p])
    if threads > 0:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


def measure(key: str, params: dict[str, Any], device: str, rounds: int, steps: int, warmup_rounds: int,
            budget: int, capacity: int | None, env: dict[str, str],
            facts: dict[str, Any] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Run the three arms of one workload; returns, per arm, each round's record (warm-up rounds included) as
    :func:`tools.bench.overhead_report.summarize` takes it. ``facts`` (if given) gets ``pool``: where arm A's
    memory came from, ``"agent pool"`` or ``"per-process pool"`` (:attr:`workers.agent.pool.Pool.shared`)."""
    from placement.coordinator import Coordinator
    from tools import jobpath

    total = (warmup_rounds + rounds) * steps
    params = {**params, "iterations": total}
    curve = stand_in_curve(budget, device)
    base = {"workload": key, "params": params, "device": device, "job": 1, "curve": curve, "budget_bytes": budget,
            "capacity_bytes": capacity}
    os.environ.update(env)  # the agent's job process inherits this process's environment
    turns = Turns()
    agent = TurnAgent(device, capacity, budget, Coordinator(0.85 * budget), AgentSettings.from_env(), turns=turns)
    if facts is not None:
        facts["pool"] = "agent pool" if agent.pool.shared else "per-process pool"
    outcome: dict[str, Any] = {}
    work = Path(tempfile.mkdtemp(prefix="zico-bench-"))

    rt = jobpath.runtime(agent, work)

    def run_a() -> None:
        try:  # as a device worker runs it (tools.jobpath)
            outcome.update(jobpath.run(rt, 1, key, params, curve, on_message=turns.on_message))
        except Exception as exc:  # noqa: BLE001 - reported by the rounds below
            outcome.update(status="failed", reason=f"{type(exc).__name__}: {exc}")
        finally:
            turns.close(f"{outcome.get('status')}: {outcome.get('reason', '')}")

    a = threading.Thread(target=run_a, name="arm-A")
    a.start()
    others = {arm: ArmProcess(arm, {**base, "arm": name}, env) for arm, name in (("B", "plain"), ("C", "inprocess"))}
    times: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    try:
        for p in others.values():
            p.ready()
        turns.wait_held(READY_TIMEOUT_S)
        for r in range(warmup_rounds + rounds):
            for arm in (ARMS if r % 2 == 0 else ARMS[::-1]):
                if arm == "A":
                    cpu0, agent0 = process_cpu_ns(turns.pid) or 0, process_cpu_ns()
                    ends = turns.wait_ends(turns.allow(steps), ROUND_TIMEOUT_S)[-steps:]
                    cpu1, agent1 = process_cpu_ns(turns.pid) or 0, process_cpu_ns()
                    record = {"agent_cpu_ns": agent1 - agent0}
                else:
                    pid = others[arm].proc.pid
                    cpu0 = process_cpu_ns(pid) or 0
                    ends = others[arm].run(steps)
                    cpu1 = process_cpu_ns(pid) or 0
                    record = {}
                times[arm].append({"ends": ends, "process_cpu_ns": cpu1 - cpu0, **record})
    finally:
        for p in others.values():
            p.close()
        turns.close("benchmark over")
        a.join(60)
        agent.close()
    if outcome.get("status") != "succeeded":
        raise BenchError(f"arm A (job process): {outcome.get('status')}: {outcome.get('reason')}")
    return times


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m tools.bench.job_overhead", description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    ap.add_argument("--job", action="append", default=None,
                    help="workload[:name=value,...], repeat for each workload (default: resnet18 and tiny-lm on CPU, "
                         "resnet50 and gpt2-small on CUDA, small batches)")
    ap.add_argument("--rounds", type=int, default=8, help="measured rounds (after the warm-up rounds)")
    ap.add_argument("--steps", type=int, default=10, help="iterations of every arm per round (>= 3)")
    ap.add_argument("--warmup-rounds", type=int, default=1, help="rounds excluded at the start")
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads of every arm (0: torch's default)")
    ap.add_argument("--budget", default=None, help="device budget, e.g. 4GiB (default: 4GiB on CPU, 90%% of a GPU)")
    ap.add_argument("--out", default=None, help="also write <out>.json and <out>.txt")
    a = ap.parse_args(argv)
    if a.rounds < 1 or a.steps < 3 or a.warmup_rounds < 0 or a.threads < 0:
        ap.error("--rounds >= 1, --steps >= 3, --warmup-rounds >= 0 and --threads >= 0 are required")
    if not (a.device == "cpu" or a.device.startswith("cuda")):
        ap.error(f"--device must be cpu or cuda[:N], got {a.device!r}")
    return a


def _budget(text: str | None, device: str) -> int:
    """``--budget`` in bytes; by default 4 GiB on CPU, 90 % of the GPU's memory (NVML, else torch in a child
    process: this one never initialises CUDA)."""
    from workers.nvml import DeviceInfoError, gpu_info, parse_bytes

    if text is not None:
        return parse_bytes(text)
    if device == "cpu":
        return 4 << 30
    index = int(device.partition(":")[2] or 0)
    try:
        total = gpu_info(index).total_bytes
    except (DeviceInfoError, ImportError, OSError):
        out = subprocess.run([sys.executable, "-c", "import sys, torch; "
                              f"print(torch.cuda.get_device_properties({index}).total_memory)"],
                             capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            why = (out.stderr.strip().splitlines() or ["no error text"])[-1]
            raise BenchError(f"--device {device}: cannot read its memory size ({why}); give --budget")
        total = int(out.stdout.strip())
    return int(0.9 * total)


def _torch_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    """Exit status 0 when every arm of every workload ran (whatever the ratios), 1 when an arm failed, 2 for a
    budget that cannot be read or set."""
    from tools.colocate import parse_job

    a = parse_args(argv)
    jobs = [parse_job(text) for text in (a.job or (CUDA_JOBS if a.device.startswith("cuda") else CPU_JOBS))]
    try:
        budget = _budget(a.budget, a.device)
    except (BenchError, ValueError) as exc:
        print(f"job_overhead: {exc}", file=sys.stderr)
        return 2
    capacity = budget if a.device == "cpu" else None
    env = child_env(a.threads)
    header = {"device": a.device, "torch": _torch_version(), "cpus": os.cpu_count(), "threads": a.threads,
              "rounds": a.rounds, "steps": a.steps, "warmup_rounds": a.warmup_rounds, "budget_bytes": budget,
              "load_start": " ".join(f"{x:.1f}" for x in os.getloadavg())}
    results = []
    try:
        for key, params in jobs:
            facts: dict[str, Any] = {}
            times = measure(key, params, a.device, a.rounds, a.steps, a.warmup_rounds, budget, capacity, env, facts)
            results.append({"job": f"{key}:" + ",".join(f"{k}={v}" for k, v in params.items()), "times_s": times,
                            "summary": summarize(times, a.warmup_rounds), **facts})
    except BenchError as exc:
        print(f"job_overhead: {exc}", file=sys.stderr)
        return 1
    header["load_end"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = report_lines(results, header)
    print("\n".join(lines))
    if a.out:
        out = Path(a.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps({**header, "results": results}, indent=2))
        out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
