"""Jobs as their own OS processes under one device agent (workers.agent), with the agent pool.

Real job processes (``python -m workers.jobproc``, or the same with a fault injected: ``faulty_job.py``), real
training, the real native agent pool. Tests wait on the jobs' own messages, not on sleeps.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from workers.agent import AgentSettings, DeviceAgent, JobRun

HERE = Path(__file__).resolve().parent
pytestmark = pytest.mark.slow
MiB = 1 << 20


@pytest.fixture
def job_path(monkeypatch):
    """Job processes find faulty_job.py (this folder) on their path."""
    monkeypatch.setenv("PYTHONPATH", f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")


def job_spec(tmp_path, workload, params, **extra):
    return {"workload": workload, "params": params, "device": "cpu", "checkpoint_dir": str(tmp_path / "ckpt"),
            "data_dir": str(tmp_path / "data"), "checkpoint_every_s": None, **extra}


class Recorder:
    """Every message each job sent, with its arrival time (monotonic s)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.log: list[tuple[float, int, dict]] = []

    def for_job(self, job_id, then=None):
        def on_message(msg):
            with self.lock:
                self.log.append((time.monotonic(), job_id, msg))
            if then is not None:
                then(msg)
        return on_message

    def times(self, job_id, kind):
        with self.lock:
            return [t for t, j, m in self.log if j == job_id and m["type"] == kind]


def run_all(agent, runs, after_ready=None, outs=None):
    """Run every JobRun in a thread of its own; ``after_ready`` = {a: b}: start b once a sent ``ready``.
    ``outs`` (job id -> outcome) fills as each run returns, so a stop check can watch it."""
    outs = {} if outs is None else outs
    after_ready = after_ready or {}
    readies = {a: threading.Event() for a in after_ready}
    for r in runs:
        if r.job_id in readies:
            inner = r.on_message
            r.on_message = (lambda inner, ev: lambda m: (inner(m), m["type"] == "ready" and ev.set()))(
                inner, readies[r.job_id])
    waits_for = {b: readies[a] for a, b in after_ready.items()}

    def one(r):
        if r.job_id in waits_for:
            assert waits_for[r.job_id].wait(600)
        outs[r.job_id] = agent.run(r)
        outs[r.job_id]["returned_at"] = time.monotonic()
        outs[r.job_id]["held_at_return"] = agent.pool.native.stats()["jobs"][r.job_id]["held_bytes"]

    threads = [threading.Thread(target=one, args=(r,)) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(900)
    assert not any(t.is_alive() for t in threads), "a job run did not return"
    return outs


TWO = [("digits-cnn", {"iterations": 200, "batch_size": 256, "image_size": 32}),
       ("tiny-lm", {"iterations": 6, "batch_size": 16, "seq_len": 64})]


PROFILE = """
import json, sys
import zico_allocator as za
from workers.colocate import solo_profile
za.install_cpu()
out = []
for n, (key, params) in enumerate(json.loads(sys.argv[1]), start=1):
    curve, reserved = solo_profile(key, params, "cpu", sys.argv[2], 500 + n)
    out.append({"curve": curve.to_dict(), "reserved": reserved})
print(json.dumps(out))
"""


def test_two_real_jobs_as_two_processes_share_a_pool_smaller_than_the_sum_of_their_solo_peaks(tmp_path):
    from placement.coordinator import Coordinator
    from placement.curves import curve_from_dict
    from workers.colocate import feasible_floor

    # each job profiled alone through the allocator, in a process of its own (as scripts/demo.py does)
    prof = subprocess.run([sys.executable, "-c", PROFILE, json.dumps(TWO), str(tmp_path / "data")],
                          capture_output=True, text=True, timeout=900)
    assert prof.returncode == 0, prof.stderr[-2000:]
    solo = json.loads(prof.stdout.strip().splitlines()[-1])
    curves = [curve_from_dict(s["curve"]) for s in solo]
    # each job's solo peak as the agent pool sees it (held chunks: the client's segments, as a budget counts)
    alone = DeviceAgent("cpu", 1 << 30, 1 << 30, None, AgentSettings())
    try:
        for n, (key, params) in enumerate(TWO, start=1):
            out = alone.run(JobRun(n, job_spec(tmp_path, key, {**params, "iterations": 4})))
            assert out["status"] == "succeeded", out["reason"]
        reserved = [alone.pool.native.stats()["jobs"][n]["peak_held_bytes"] for n in (1, 2)]
    finally:
        alone.close()
    headroom = 0.15
    # as workers.colocate: a fraction of the sum of the solo peaks, at least the pair's feasible floor
    budget = int(max(0.9 * sum(reserved), feasible_floor(curves, reserved) / (1 - headroom)))
    assert budget < sum(reserved)  # capacity = budget: below the sum of the solo peaks
    agent = DeviceAgent("cpu", budget, budget, Coordinator((1 - headroom) * budget), AgentSettings())
    rec = Recorder()
    try:
        outs = run_all(agent, [JobRun(10 + n, job_spec(tmp_path, key, params), curve=s["curve"],
                                      on_message=rec.for_job(10 + n))
                               for n, ((key, params), s) in enumerate(zip(TWO, solo), start=1)],
                       after_ready={11: 12})  # the LM starts once the CNN is training: they overlap
        pool = agent.pool.native.stats()["pool"]
    finally:
        agent.close()
    assert [outs[j]["status"] for j in (11, 12)] == ["succeeded", "succeeded"], (
        [outs[j]["reason"] for j in (11, 12)], reserved, [int(c.peak_bytes) for c in curves], budget)
    assert outs[11]["pid"] != outs[12]["pid"] and os.getpid() not in (outs[11]["pid"], outs[12]["pid"])
    assert pool["peak_held_bytes"] <= budget and pool["capacity_bytes"] <= budget
    # they ran at the same time: an iteration of one ended between the other's first and last iterations
    ends_a, ends_b = rec.times(11, "iteration_end"), rec.times(12, "iteration_end")
    assert any(ends_b[0] < t < ends_b[-1] for t in ends_a) or any(ends_a[0] < t < ends_a[-1] for t in ends_b)
    print(f"\nsolo curve peaks {[c.peak_bytes // MiB for c in curves]} MiB, solo held peaks "
          f"{[r // MiB for r in reserved]} MiB, capacity = budget {budget // MiB} MiB, "
          f"co-located pool peak {pool['peak_held_bytes'] // MiB} MiB, {pool['transfers']} chunk transfers, "
          f"gate delays {[outs[j]['metrics']['delay_s'] for j in (11, 12)]} s")


FAULTS = {3: "segfault", 4: "exit3", 5: "exception", 6: "hang", 7: "malloc", 8: "escape-budget", 9: "escape-scope",
          10: "escape-bind"}
EXPECTED = {2: ["killed by signal SIGKILL"],
            3: ["killed by signal SIGSEGV before reporting an outcome\nlast ", " lines of stderr:\n"
                "Fatal Python error: Segmentation fault"],
            4: ["exited with code 3", "about to exit with code 3"],
            5: ["RuntimeError: injected failure in iteration 2\nexited with code 1\nlast ", "RuntimeError: injected"],
            6: ["hung: no progress message for 8 s"],
            7: [" of memory outside Zico's allocator (plain malloc, another library), over the 128.00 MiB allowed: "
                 "stopped\nkilled by signal SIGKILL"],
            8: ["OutOfMemoryError", "agent refused: budget"],
            9: [" of memory outside Zico's allocator (plain malloc, another library), over the 128.00 MiB allowed: "
                 "stopped\nkilled by signal SIGKILL"],
            10: [" of memory outside Zico's allocator (plain malloc, another library), over the 128.00 MiB allowed: "
                 "stopped\nkilled by signal SIGKILL"]}


def test_crash_matrix_each_fault_fails_its_job_with_the_reason_and_the_neighbour_finishes(tmp_path, job_path,
                                                                                         monkeypatch):
    budget = 256 * MiB
    for job, kind in FAULTS.items():
        monkeypatch.setenv(f"ZICO_TEST_FAULT_{job}", kind)
    settings = AgentSettings(hang_timeout_s=8, stop_grace_s=5, bypass_margin_bytes=128 * MiB, job_module="faulty_job")
    agent = DeviceAgent("cpu", 1 << 30, budget, None, settings)
    agent.pool.native.set_wait(3.0)  # the over-budget request of escape-budget is refused after 3 s
    rec = Recorder()
    killed = {}

    def kill_after_iteration_1(msg):  # job 2 is SIGKILLed from outside, mid-run
        if msg["type"] == "iteration_end" and msg["iteration"] == 1 and not killed:
            killed["held"] = agent.pool.native.stats()["jobs"][2]["held_bytes"]
            killed["t"] = time.monotonic()
            os.kill(runs[1].pid, signal.SIGKILL)

    params = {"iterations": 6, "batch_size": 64, "image_size": 16}
    # The neighbour iterates until every faulty job has ended (then the test stops it): a fixed iteration count
    # made the co-run depend on the machine's speed (on a quiet machine 400 iterations ended before the hang
    # timeout).
    outs: dict = {}
    faulty = [2, *FAULTS]
    runs = [JobRun(1, job_spec(tmp_path, "digits-cnn", {**params, "iterations": 1_000_000}), on_message=rec.for_job(1),
                   stop_check=lambda: "cancelled" if all(j in outs for j in faulty) else None),
            JobRun(2, job_spec(tmp_path, "digits-cnn", params), on_message=rec.for_job(2, kill_after_iteration_1))]
    runs += [JobRun(j, job_spec(tmp_path, "digits-cnn", params, test_budget_bytes=budget),
                    on_message=rec.for_job(j)) for j in FAULTS]
    watcher_done = threading.Event()
    back = {}

    def watch_sigkilled_job():  # how soon after the SIGKILL job 2's chunks are back in the pool
        while not watcher_done.is_set():
            if "t" in killed and agent.pool.native.stats()["jobs"][2]["held_bytes"] == 0:
                back["s"] = time.monotonic() - killed["t"]
                return
            time.sleep(0.01)

    watcher = threading.Thread(target=watch_sigkilled_job)
    watcher.start()
    try:
        run_all(agent, runs, outs=outs)
        stats = agent.pool.native.stats()
    finally:
        watcher_done.set()
        watcher.join()
        agent.close()
    assert outs[1]["status"] == "cancelled", outs[1]["reason"]  # unharmed: stopped by the test, not by a fault
    assert outs[1]["metrics"]["iterations_done"] > 0
    neighbour_last = rec.times(1, "iteration_end")[-1]
    for job in faulty:
        out = outs[job]
        assert out["status"] == "failed", (job, out)
        for text in EXPECTED.get(job, []):
            assert text in out["reason"], (job, out["reason"])
        assert out["returned_at"] < neighbour_last, f"job {job} ended after the neighbour: not a co-run"
        assert stats["jobs"][job]["peak_held_bytes"] > 0 and out["held_at_return"] == 0, (job, stats["jobs"][job])
        assert not stats["jobs"][job]["connected"]
    assert killed["held"] > 0 and back["s"] < 1.0
    # limits lifted inside a job process changed nothing in the agent
    assert stats["pool"]["budget_bytes"] == budget and stats["pool"]["peak_held_bytes"] <= budget
    print(f"\nSIGKILLed job's {killed['held'] // MiB} MiB back in the pool {back['s'] * 1000:.0f} ms after the kill; "
          + "; ".join(f"{j}: {outs[j]['reason'].splitlines()[0][:90]}" for j in [2, *FAULTS]))
