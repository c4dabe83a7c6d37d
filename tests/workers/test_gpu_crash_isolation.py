"""Crash isolation on a GPU (issue 15 item 6): job processes drawing on one CUDA agent pool (VMM chunks). A sticky
CUDA error (an illegal address from a bad kernel: faulty_train's ``cuda-illegal-address``) or a SIGKILL in one job
process ends only that job, ``failed`` with the reason; every chunk it held is back in the pool within 1 s of its
exit; the neighbour trains on and succeeds, and a job started after the faults trains on the same pool.

Real job processes run as a device worker runs a catalog job (the catalog project under the job process entry, in
its sandbox where the host has one: ``tests/workers/faulty_project/faulty_train.py`` with the fault injected), real
CUDA. Needs a GPU
(``gpu`` marker; scripts/gpu-check.sh runs it as its crash-isolation step). Under NVIDIA MPS a fatal fault reaches
every client of the GPU (docs/workers.md "MPS"), so the test skips there.
"""
import os
import signal
import threading
import time

import pytest

from workers.agent import AgentSettings, JobRun
from tools.crash_harness import ExitWatch, PacedAgent
from faults import faulty_spec

MiB = 1 << 20
pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]
STICKY = ("illegal memory access", "CUresult 700", "unspecified launch failure")


def mps_active() -> bool:
    """An MPS control daemon's pipe where CUDA clients look for it (CUDA_MPS_PIPE_DIRECTORY, /tmp/nvidia-mps)."""
    return os.path.exists(os.path.join(os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps", "control"))


def spec(tmp_path, iterations, fault="none"):
    return faulty_spec(tmp_path, "digits-cnn", {"iterations": iterations, "batch_size": 256, "image_size": 32,
                                                "data": "synthetic"}, fault, device="cuda:0")


def test_a_sticky_cuda_error_or_a_kill_ends_only_that_job_and_its_chunks_come_back(tmp_path):
    if mps_active():
        pytest.skip("an MPS daemon runs: a fatal GPU fault reaches every MPS client (docs/workers.md, MPS)")
    faulty, per_fault = [2, 3], 10
    neighbour_iterations = per_fault * (len(faulty) + 1)
    outs: dict[int, dict] = {}

    def hold(job, iteration):  # the neighbour: 10 iterations, 10 more as each faulty job ends, the last 10 after
        ended = sum(j in outs for j in faulty)
        return job == 1 and ended < len(faulty) and iteration >= per_fault * (ended + 1)

    agent = PacedAgent("cuda:0", None, 1 << 30, None,
                       AgentSettings(hang_timeout_s=120, startup_timeout_s=300), hold=hold)
    if not agent.pool.shared:
        agent.close()
        pytest.fail("no agent pool on cuda:0: the driver refused VMM chunks (see the worker log)")
    if agent.user_code_refusal():  # the faulty project is not the catalog project: it runs only in a sandbox
        agent.close()
        pytest.skip(f"no sandbox on this host for the faulty project: {agent.user_code_refusal()}")
    runs: dict[int, JobRun] = {}
    watch = ExitWatch(agent, runs)
    lock = threading.Lock()
    ends: dict[int, list[float]] = {1: [], 4: []}
    stamped, killed_at, fault_held = {}, {}, {}
    neighbour_ready = threading.Event()

    def on_message(job):
        def see(msg):
            kind = msg["type"]
            if kind == "hello":
                watch.on_hello(job)
            elif kind == "ready" and job == 1:
                neighbour_ready.set()
            elif kind == "mark" and msg["kind"] == "forward" and msg["iteration"] == 2 and job == 2:
                fault_held[job] = watch.held(job)
            elif kind == "iteration_end":
                with lock:
                    ends.setdefault(job, []).append(time.monotonic())
                if job == 3 and msg["iteration"] == 1 and job not in killed_at:
                    fault_held[job] = watch.held(job)
                    killed_at[job] = time.monotonic()
                    os.kill(runs[3].job_pid, signal.SIGKILL)  # the job's own process
        return see

    def on_output(job):
        def line(stream, text):
            if stream == "stderr" and text.startswith("zico-test: fault at "):
                stamped[job] = float(text.split()[-1])
        return line

    runs[1] = JobRun(1, spec(tmp_path, neighbour_iterations), on_message=on_message(1))
    runs[2] = JobRun(2, spec(tmp_path, 6, "cuda-illegal-address"), on_message=on_message(2),
                     on_output=on_output(2))
    runs[3] = JobRun(3, spec(tmp_path, 6), on_message=on_message(3))
    runs[4] = JobRun(4, spec(tmp_path, 5), on_message=on_message(4))  # starts once both faulty jobs have ended

    def one(job):
        if job in faulty:
            assert neighbour_ready.wait(300)
        if job == 4:
            deadline = time.monotonic() + 240
            while not all(j in outs for j in faulty) and time.monotonic() < deadline:
                time.sleep(0.05)
        outs[job] = agent.run(runs[job])
        outs[job]["returned_at"] = time.monotonic()

    threads = [threading.Thread(target=one, args=(j,)) for j in runs]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(280)
        assert not any(t.is_alive() for t in threads), "a job run did not return"
        stats = agent.pool.native.stats()
    finally:
        watch.close()
        agent.close()
    sticky, killed = outs[2], outs[3]
    assert sticky["status"] == "failed" and any(s in sticky["reason"] for s in STICKY), sticky
    assert killed["status"] == "failed" and "killed by signal SIGKILL" in killed["reason"], killed
    for job in (1, 4):
        assert outs[job]["status"] == "succeeded", (job, outs[job]["reason"])
    assert outs[1]["metrics"]["iterations_done"] == neighbour_iterations
    before_exit = {**stamped, **killed_at}
    for job in faulty:
        # a co-run: the neighbour trained before the fault and after the faulty job's outcome was in
        assert ends[1][0] < before_exit[job] and outs[job]["returned_at"] < ends[1][-1], job
        assert fault_held[job] > 0 and job in watch.back, (job, fault_held.get(job), watch.held_at_exit.get(job))
        assert watch.back[job] - before_exit[job] < 1.0, (job, watch.back[job] - before_exit[job])
        assert not stats["jobs"][job]["connected"] and stats["jobs"][job]["held_bytes"] == 0
    assert stats["pool"]["peak_held_bytes"] > 0 and stats["pool"]["held_bytes"] == 0
    print(f"\nsticky error: {sticky['reason'].splitlines()[0][:120]}")
    for job in faulty:
        print(f"job {job}: {fault_held[job] // MiB} MiB held at the fault, all back "
              f"{(watch.back[job] - before_exit[job]) * 1000:.1f} ms after it; the neighbour trained "
              f"{sum(t > outs[job]['returned_at'] for t in ends[1])} iterations after its end; "
              f"a new job trained {outs[4]['metrics']['iterations_done']} iterations after the faults")
