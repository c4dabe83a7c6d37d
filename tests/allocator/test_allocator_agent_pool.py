"""The agent pool across real processes: a device agent (AgentPool, in this test process) and job
processes (tests/allocator/agent_job.py, started with the socket in pass_fds) that install the
agent client and allocate. Shown: sharing below the sum of solo peaks, reuse across processes
(transfers), a killed job's chunks back within 1 s, a greedy job capped while another proceeds,
the deadlock grant and the return under the budget, the scrub across tenants, and that nothing a
job calls raises what the agent grants."""
import array
import json
import os
import socket
import struct
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import zico_allocator as za

MiB = 1 << 20
STEP = 12 * MiB  # one block = one segment of its own (>= 10 MiB) = 6 chunks of 2 MiB
JOB_SCRIPT = Path(__file__).with_name("agent_job.py")


class JobProcess:
    """A job process connected to `pool`; events are its stdout JSON lines."""

    def __init__(self, pool, job_id, tenant_id, mode, *args):
        fd = pool.add_job(job_id, tenant_id)
        env = dict(os.environ, **{za.AGENT_FD_ENV: str(fd)})
        self.proc = subprocess.Popen([sys.executable, str(JOB_SCRIPT), mode, "--job", str(job_id), *map(str, args)],
                                     pass_fds=[fd], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        os.close(fd)  # the job holds the only other end now: its exit closes the socket
        self.events: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.events.put(json.loads(line))
        self.events.put(None)

    def next(self, timeout=60.0) -> dict:
        event = self.events.get(timeout=timeout)
        assert event is not None, f"job exited (rc {self.proc.wait()}) before the expected event"
        return event

    def until(self, key, timeout=60.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            event = self.next(max(0.1, deadline - time.monotonic()))
            if key in event:
                return event

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def finish(self, timeout=60.0):
        if self.proc.poll() is None:
            try:
                self.send("exit")
            except BrokenPipeError:
                pass
        assert self.proc.wait(timeout) == 0


@pytest.fixture
def agent():
    pools = []

    def make(capacity, budget=None, wait_s=10.0, chunk=None):
        pool = za.AgentPool(capacity, budget, chunk)
        pool.set_wait(wait_s)
        pools.append(pool)
        return pool
    yield make
    for pool in pools:
        pool.close()


def solo_peak(agent, steps):
    pool = agent(1024 * MiB)
    job = JobProcess(pool, 1, 1, "ramp", "--iterations", 2, "--steps", steps, "--step-bytes", STEP)
    done = job.until("done")
    job.finish()
    assert done["ooms"] == 0
    return pool.stats()["pool"]["peak_held_bytes"]


@pytest.mark.timeout(180)
def test_two_processes_share_a_pool_below_the_sum_of_their_solo_peaks(agent):
    peak = solo_peak(agent, steps=4)
    assert peak == 4 * STEP
    capacity = peak * 3 // 2  # 72 MiB < 2 x 48 MiB
    pool = agent(capacity)
    jobs = [JobProcess(pool, j, 1, "ramp", "--iterations", 8, "--steps", 4, "--step-bytes", STEP, "--max-ooms", 200)
            for j in (1, 2)]
    done = [job.until("done", timeout=150) for job in jobs]
    for job in jobs:
        job.finish()
    stats = pool.stats()
    figures = {"solo_peak": peak, "capacity": capacity, **{k: stats["pool"][k] for k in
               ("peak_held_bytes", "transfers", "transfer_bytes", "deadlock_grants")},
               "ooms": [d["ooms"] for d in done], "waits": [stats["jobs"][j]["waits"] for j in (1, 2)]}
    print(figures)
    assert [d["done"] for d in done] == [8, 8], figures
    assert stats["pool"]["peak_held_bytes"] <= capacity
    assert stats["pool"]["peak_held_bytes"] > peak  # both held memory at once
    # Bytes one process returned were later granted to the other.
    assert stats["pool"]["transfers"] > 0 and stats["pool"]["transfer_bytes"] == stats["pool"]["transfers"] * 2 * MiB
    assert stats["pool"]["held_bytes"] == 0


@pytest.mark.timeout(60)
def test_a_killed_process_chunks_are_back_within_one_second(agent):
    pool = agent(256 * MiB)
    job = JobProcess(pool, 5, 1, "hold", "--step-bytes", 64 * MiB)
    job.until("held")
    assert pool.stats()["jobs"][5]["held_bytes"] == 64 * MiB
    job.proc.kill()
    start = time.monotonic()
    while pool.stats()["pool"]["held_bytes"] != 0 and time.monotonic() - start < 1.0:
        time.sleep(0.001)
    elapsed = time.monotonic() - start
    job.proc.wait()
    stats = pool.stats()
    print({"returned_after_s": elapsed})
    assert stats["pool"]["held_bytes"] == 0 and stats["pool"]["chunks_free"] == stats["pool"]["chunks_total"]
    assert not stats["jobs"][5]["connected"] and stats["jobs"][5]["chunks_returned"] == 32


@pytest.mark.timeout(120)
def test_a_greedy_process_is_capped_while_the_other_proceeds(agent):
    budget = 120 * MiB
    pool = agent(budget, budget, wait_s=0.2)
    steady = JobProcess(pool, 1, 1, "ramp", "--iterations", 12, "--steps", 3, "--step-bytes", STEP, "--max-ooms", 50)
    steady.until("iteration")  # the steady job runs (and caches its 36 MiB) before the greedy one starts
    greedy = JobProcess(pool, 2, 1, "greedy", "--step-bytes", STEP, "--max-ooms", 5)
    greedy_done = greedy.until("done", timeout=90)
    steady_done = steady.until("done", timeout=90)
    stats = pool.stats()  # both still connected: the steady job keeps its cached segments
    greedy.finish()
    steady.finish()
    print({"greedy_held": greedy_done["held"], "steady_ooms": steady_done["ooms"],
           "greedy_refused": stats["jobs"][2]["refused"], "peak_held": stats["pool"]["peak_held_bytes"]})
    assert steady_done["done"] == 12
    assert stats["jobs"][2]["refused"] >= 5
    assert stats["jobs"][2]["peak_held_bytes"] <= budget - 3 * STEP  # what the steady job left free
    assert stats["pool"]["peak_held_bytes"] <= budget and stats["pool"]["deadlock_grants"] == 0


@pytest.mark.timeout(60)
def test_a_retrying_job_never_holds_more_than_the_budget(agent):
    budget = 48 * MiB
    pool = agent(512 * MiB, budget, wait_s=5.0)
    job = JobProcess(pool, 1, 1, "greedy", "--step-bytes", STEP, "--max-ooms", 20)
    done = job.until("done")
    stats = pool.stats()
    job.finish()
    assert done["held"] == 4 * STEP  # 48 MiB: every retry after the first refusal was refused
    assert stats["jobs"][1]["peak_held_bytes"] == budget
    assert stats["jobs"][1]["refused"] >= 20 and stats["pool"]["deadlock_grants"] == 0
    # Alone, no one could free: refused at once, not after the 5 s wait.
    assert stats["jobs"][1]["wait_s"] < 2.0


@pytest.mark.timeout(60)
def test_a_yielding_jobs_cache_serves_a_larger_waiter_and_only_then(agent):
    """Note [Yielding jobs]: a smaller job's cache is not reclaimed for a larger waiter (a greedy job must not
    drain a steady one), unless the coordinator holds the smaller job back at its iteration start."""
    budget = 6 * STEP
    pool = agent(budget * 2, budget, wait_s=1.0)
    small = JobProcess(pool, 1, 1, "script", "--step-bytes", STEP)
    big = JobProcess(pool, 2, 1, "script", "--step-bytes", STEP)
    for _ in range(2):
        small.send("alloc")
        assert small.until("alloc")["alloc"]
    small.send("free")
    assert small.until("freed")["reserved"] == 2 * STEP  # cached, still held from the agent
    for _ in range(4):
        big.send("alloc")
        assert big.until("alloc")["alloc"]
    assert pool.stats()["pool"]["held_bytes"] == budget
    big.send("alloc")  # the small job holds less and is not held back: nobody is asked, the wait runs out
    refused = big.until("alloc")
    assert not refused["alloc"] and pool.stats()["jobs"][1]["held_bytes"] == 2 * STEP
    pool.set_yielding(1, True)  # the coordinator now holds the small job at its gate
    big.send("alloc")
    granted = big.until("alloc")
    assert granted["alloc"] and granted["blocks"] == 5
    stats = pool.stats()
    assert stats["jobs"][1]["held_bytes"] < 2 * STEP and stats["pool"]["held_bytes"] <= budget
    assert stats["pool"]["transfers"] >= STEP // (2 * MiB)  # the small job's chunks went to the big one
    with pytest.raises(za.ZicoError, match="no job 99"):
        pool.set_yielding(99, True)
    small.finish()
    big.finish()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("gated", [True, False])
def test_a_waiter_beside_a_job_held_at_its_gate_with_nothing_to_return_is_granted_not_refused(agent, gated):
    """Note [Held at the gate]: a job the coordinator holds at its gate whose memory is all in use cannot free
    until it runs; a neighbour waiting inside its iteration beside it is granted past the budget (a counted
    deadlock grant, within capacity) instead of waiting out its wait and being refused. A job that merely yields
    through its iteration could still free: beside it the waiter waits, and is refused at the end of its wait."""
    budget = 4 * STEP
    pool = agent(2 * budget, budget, wait_s=20.0 if gated else 1.0)
    held, waiter = (JobProcess(pool, i, 1, "script", "--step-bytes", STEP) for i in (1, 2))
    for job in (held, held, waiter, waiter):
        job.send("alloc")
        assert job.until("alloc")["alloc"]  # each block in use: nothing of it can be returned
    pool.set_yielding(1, True, gated=gated)
    waiter.send("alloc")
    answer = waiter.until("alloc")
    stats = pool.stats()
    if gated:
        assert answer["alloc"] and answer["blocks"] == 3, answer
        assert stats["pool"]["deadlock_grants"] == 1 and stats["pool"]["held_bytes"] == budget + STEP
        assert stats["jobs"][1]["held_bytes"] == 2 * STEP and stats["jobs"][1]["refused"] == 0
        waiter.send("free")  # its iteration ends: held returns under the budget
        waiter.until("freed")
        while pool.stats()["pool"]["held_bytes"] > budget:
            time.sleep(0.01)
    else:
        assert not answer["alloc"] and "waited" in answer["detail"], answer
        assert stats["pool"]["deadlock_grants"] == 0 and stats["pool"]["held_bytes"] == budget
    with pytest.raises(za.ZicoError, match="no job 99"):
        pool.set_yielding(99, True, gated=True)
    held.finish()
    waiter.finish()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("plan_steps", [3, 2])
def test_a_deadlock_grant_never_takes_a_waiter_past_its_plan(agent, plan_steps):
    """Note [Deadlock grants within a plan]: beside a neighbour held at its gate, a waiter whose grant stays within
    what its gate plans for it is granted past the budget, as before; one the grant would take past its plan is
    the overrun's cause (a leaker): refused at once, naming its plan, and the pool stays within the budget."""
    budget = 4 * STEP
    pool = agent(2 * budget, budget, wait_s=20.0)
    held, waiter = (JobProcess(pool, i, 1, "script", "--step-bytes", STEP) for i in (1, 2))
    for job in (held, held, waiter, waiter):
        job.send("alloc")
        assert job.until("alloc")["alloc"]
    pool.set_job_plan(2, plan_steps * STEP)  # within: its third block is planned; past: it plans two
    pool.set_yielding(1, True, gated=True)
    waiter.send("alloc")
    answer = waiter.until("alloc")
    stats = pool.stats()
    if plan_steps == 3:
        assert answer["alloc"] and stats["pool"]["deadlock_grants"] == 1, answer
        waiter.send("free")
        waiter.until("freed")
    else:
        assert not answer["alloc"] and "its plan gives it" in answer["detail"], answer
        assert stats["pool"]["deadlock_grants"] == 0 and stats["jobs"][2]["over_plan"] == 1
        assert stats["pool"]["peak_held_bytes"] <= budget
    with pytest.raises(ValueError, match="plan_bytes"):
        pool.set_job_plan(2, 0)
    held.finish()
    waiter.finish()


@pytest.mark.timeout(60)
def test_deadlock_grant_then_the_pool_returns_under_the_budget(agent):
    budget, capacity = 48 * MiB, 96 * MiB
    pool = agent(capacity, budget, wait_s=20.0)
    a = JobProcess(pool, 1, 1, "script", "--step-bytes", STEP)
    b = JobProcess(pool, 2, 1, "script", "--step-bytes", STEP)
    for job in (a, b, a, b):
        job.send("alloc")
        assert job.until("alloc")["alloc"]
    assert pool.stats()["pool"]["held_bytes"] == budget
    a.send("alloc")  # a waits: b could free
    while not pool.stats()["jobs"][1]["waiting"]:
        time.sleep(0.001)
    b.send("alloc")  # now both wait and nobody else holds memory: the deadlock rule grants one
    first = a.until("alloc")
    assert first["alloc"] and first["blocks"] == 3
    stats = pool.stats()
    assert stats["pool"]["deadlock_grants"] == 1 and stats["pool"]["held_bytes"] == budget + STEP
    assert stats["pool"]["held_bytes"] <= capacity
    a.send("free")  # the grantee frees: held returns under the budget, and b's request fits again
    a.until("freed")
    second = b.until("alloc")
    assert second["alloc"] and second["blocks"] == 3
    stats = pool.stats()
    assert stats["pool"]["held_bytes"] <= budget
    assert stats["pool"]["over_budget_bytes_peak"] == STEP and stats["pool"]["peak_held_bytes"] == budget + STEP
    a.finish()
    b.finish()


@pytest.mark.timeout(60)
def test_a_greedy_job_gets_none_of_the_cache_a_job_returns_on_its_way_to_a_waiting_request(agent):
    budget = 120 * MiB
    pool = agent(2 * budget, budget, wait_s=0.5)
    a = JobProcess(pool, 1, 1, "script", "--step-bytes", STEP)
    for _ in range(4):
        a.send("alloc")
        assert a.until("alloc")["alloc"]
    a.send("free")  # a's pool keeps its four 12 MiB segments cached: held 48 MiB
    assert a.until("freed")["reserved"] == 4 * STEP
    greedy = JobProcess(pool, 2, 1, "greedy", "--step-bytes", STEP, "--max-ooms", 10_000)
    try:
        greedy.until("refused")  # the rest of the budget is its, and it asks again at once, every time
        assert pool.stats()["jobs"][2]["held_bytes"] == budget - 4 * STEP
        # a needs a segment its cache cannot serve: refused without waiting, its pool returns its cache and asks
        # again, waiting. The returned chunks are parked for a (Note [Parked chunks]), not the greedy job's.
        a.send(f"alloc {20 * MiB}")
        got = a.until("alloc")
        stats = pool.stats()
    finally:
        greedy.proc.kill()
        greedy.proc.wait()
    print({j: {k: stats["jobs"][j][k] for k in ("held_bytes", "parked_bytes")} for j in (1, 2)}, stats["pool"])
    assert got["alloc"], got["detail"]
    assert stats["jobs"][2]["held_bytes"] == budget - 4 * STEP  # nothing more for the greedy job
    assert stats["jobs"][1]["held_bytes"] == 4 * STEP and stats["jobs"][1]["parked_bytes"] == 4 * STEP - 20 * MiB
    assert stats["pool"]["deadlock_grants"] == 0 and stats["pool"]["peak_held_bytes"] <= budget
    a.send("free")
    a.until("freed")
    a.finish()


@pytest.mark.timeout(60)
def test_a_retrying_job_in_a_deadlock_gets_no_grant_past_the_budget_and_the_pool_returns_under_it(agent):
    """The deadlock rule's bound with a job that keeps retrying after every refusal beside one that waits: the
    grant past the budget goes to the job holding least (max-min), never to the retrying one, whose requests
    are the smaller; the pool never holds more than its capacity and is back under the budget once the
    grantee's iteration freed. (Before, rule 4 granted the smallest request: the retrying job took one grant
    after another up to the capacity, and the other job's request was refused.)"""
    budget, capacity = 48 * MiB, 96 * MiB
    pool = agent(capacity, budget, wait_s=0.5)
    a = JobProcess(pool, 1, 1, "script", "--step-bytes", STEP)
    a.send("alloc")
    assert a.until("alloc")["alloc"]  # a holds 12 MiB
    greedy = JobProcess(pool, 2, 1, "greedy", "--step-bytes", STEP, "--max-ooms", 10_000)
    try:
        greedy.until("refused")  # 36 MiB, the rest of the budget; asks again after every refusal
        a.send(f"alloc {20 * MiB}")  # both wait and nobody else holds memory: the deadlock rule
        got = a.until("alloc")
        during = pool.stats()
        a.send("free")  # the grantee's iteration ends: its frees
        a.until("freed")
        after = pool.stats()
    finally:
        greedy.proc.kill()
        greedy.proc.wait()
    figures = {"during": {j: during["jobs"][j]["held_bytes"] // MiB for j in (1, 2)},
               "after": {j: after["jobs"][j]["held_bytes"] // MiB for j in (1, 2)},
               **{k: during["pool"][k] for k in ("deadlock_grants", "over_budget_bytes_peak", "peak_held_bytes")}}
    print(figures)
    assert got["alloc"], got["detail"]
    assert during["jobs"][1]["deadlock_grants"] == 1 and during["jobs"][2]["deadlock_grants"] == 0, figures
    assert during["jobs"][2]["peak_held_bytes"] == budget - STEP, figures  # its grant: what a left free
    assert during["pool"]["over_budget_bytes_peak"] == 20 * MiB, figures  # one request past the budget, no more
    assert during["pool"]["peak_held_bytes"] <= capacity
    assert after["pool"]["held_bytes"] <= budget, figures
    a.finish()


@pytest.mark.timeout(60)
def test_an_idle_job_gives_back_its_cached_segments_when_another_waits(agent):
    budget = 48 * MiB
    pool = agent(512 * MiB, budget, wait_s=20.0)
    a = JobProcess(pool, 1, 1, "script", "--step-bytes", STEP)
    b = JobProcess(pool, 2, 1, "script", "--step-bytes", STEP)
    for _ in range(4):
        a.send("alloc")
        assert a.until("alloc")["alloc"]
    a.send("free")  # a's pool keeps the four segments cached: the agent still counts them held
    assert a.until("freed")["reserved"] == budget
    assert pool.stats()["jobs"][1]["held_bytes"] == budget
    b.send("alloc")  # no room: the agent asks a (idle, holding more) to give back what b lacks
    got = b.until("alloc")
    stats = pool.stats()
    assert got["alloc"]
    assert stats["pool"]["reclaims_sent"] >= 1 and stats["pool"]["deadlock_grants"] == 0
    assert stats["jobs"][1]["held_bytes"] == budget - STEP and stats["jobs"][2]["held_bytes"] == STEP
    assert stats["pool"]["transfers"] == STEP // (2 * MiB)  # a's returned chunks, granted to b
    a.finish()
    b.finish()


@pytest.mark.timeout(60)
def test_a_partly_used_segment_gives_back_its_free_chunks_when_another_waits(agent):
    """Note [Giving back part of a segment]: a job whose one segment holds a live block (1.5 MiB in PyTorch's
    20 MiB segment) gives back whole chunks of the segment's free part when a neighbour waits, no more than
    the neighbour lacks; the live block keeps its bytes, and no grant passes the budget (before, the neighbour
    waited out its wait and was refused: no wholly free segment was there to return)."""
    budget = 24 * MiB
    pool = agent(512 * MiB, budget, wait_s=20.0)
    a = JobProcess(pool, 1, 1, "script", "--step-bytes", STEP)
    b = JobProcess(pool, 2, 1, "script", "--step-bytes", STEP)
    a.send(f"alloc {3 * MiB // 2}")
    assert a.until("alloc")["alloc"]
    assert pool.stats()["jobs"][1]["held_bytes"] == 20 * MiB
    b.send("alloc")  # 12 MiB: 8 MiB more than the budget leaves beside a's segment
    got = b.until("alloc")
    stats = pool.stats()
    assert got["alloc"], got
    assert stats["pool"]["deadlock_grants"] == 0 and stats["pool"]["peak_held_bytes"] <= budget, stats["pool"]
    assert stats["jobs"][1]["held_bytes"] == 12 * MiB and stats["jobs"][2]["held_bytes"] == STEP, stats["jobs"]
    a.send("stats")  # a keeps [0, 2 MiB) with its block and [10 MiB, 20 MiB) free: two segments
    assert a.until("intact") == {"reserved": 12 * MiB, "segments": 2, "intact": True}
    a.send("alloc 10485760")  # 10 MiB: served from the kept free piece, nothing asked of the agent
    assert a.until("alloc")["alloc"] and pool.stats()["jobs"][1]["held_bytes"] == 12 * MiB
    a.finish()
    b.finish()


@pytest.mark.timeout(60)
def test_scrub_a_second_tenant_reads_zeros_the_same_tenant_skips_it(agent):
    pool = agent(STEP)  # one segment's worth: every job gets the same six chunks
    writer = JobProcess(pool, 1, 1, "write", "--step-bytes", STEP)
    writer.until("written")
    writer.finish()
    reader = JobProcess(pool, 2, 2, "read", "--step-bytes", STEP)
    seen = reader.until("nonzero")
    reader.finish()
    stats = pool.stats()["pool"]
    assert seen == {"nonzero": 0, "ab": 0, "size": STEP}
    assert stats["scrubs"] == 6 and stats["transfers"] == 6
    # Same tenant: the chunks move as they are (no scrub) — tenant 2 sees tenant 2's bytes.
    writer2 = JobProcess(pool, 3, 2, "write", "--step-bytes", STEP)
    writer2.until("written")
    writer2.finish()
    reader2 = JobProcess(pool, 4, 2, "read", "--step-bytes", STEP)
    seen2 = reader2.until("nonzero")
    reader2.finish()
    assert seen2["ab"] == STEP and pool.stats()["pool"]["scrubs"] == 6


@pytest.mark.timeout(60)
def test_limits_inside_the_job_do_not_raise_the_agents_grant(agent):
    pool = agent(512 * MiB, 24 * MiB)
    job = JobProcess(pool, 1, 1, "raise-budget", "--steps", 4, "--step-bytes", STEP)
    seen = job.until("granted")
    job.finish()
    assert seen["granted"] == 2 and seen["reason"] == "agent"
    assert seen["detail"].startswith("agent refused: budget")
    assert pool.stats()["jobs"][1]["peak_held_bytes"] == 24 * MiB
    assert pool.stats()["pool"]["budget_bytes"] == 24 * MiB


@pytest.mark.timeout(60)
def test_a_forked_child_never_speaks_for_the_job(agent):
    pool = agent(256 * MiB)
    job = JobProcess(pool, 1, 1, "fork", "--step-bytes", STEP)
    seen = job.until("child_status")
    stats = pool.stats()["jobs"][1]
    job.finish()
    assert seen == {"child_status": 0, "parent_alloc": True, "parent_byte": "09"}
    # The parent's two segments, and nothing else: the child's allocation and frees stayed local.
    assert stats["held_bytes"] == 2 * STEP and stats["chunks_returned"] == 0 and stats["bad_messages"] == 0


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_torch_cpu_training_in_two_processes_through_the_agent(agent):
    pool = agent(256 * MiB)
    jobs = [JobProcess(pool, j, j, "torch", "--iterations", 20) for j in (1, 2)]
    done = [job.until("done", timeout=200) for job in jobs]
    for job in jobs:
        job.finish()
    stats = pool.stats()
    print({"done": done, "peak_held": stats["pool"]["peak_held_bytes"], "transfers": stats["pool"]["transfers"]})
    for d in done:
        assert d["done"] == 20 and d["last_loss"] < d["first_loss"]
    assert stats["pool"]["peak_held_bytes"] <= 256 * MiB and stats["pool"]["held_bytes"] == 0


@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_cuda_chunks_shared_and_scrubbed_across_processes(agent):
    pytest.importorskip("torch")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    pool = za.AgentPool(256 * MiB, None, None, device=0)
    try:
        writer = JobProcess(pool, 1, 1, "cuda-write", "--step-bytes", 64 * MiB)
        writer.until("written")
        writer.finish()
        reader = JobProcess(pool, 2, 2, "cuda-read", "--step-bytes", 64 * MiB)
        seen = reader.until("nonzero", timeout=120)
        reader.finish()
        assert seen["nonzero"] == 0 and seen["size"] == 64 * MiB
        assert pool.stats()["pool"]["scrubs"] > 0
        jobs = [JobProcess(pool, j, 1, "cuda-train", "--iterations", 20) for j in (3, 4)]
        done = [job.until("done", timeout=200) for job in jobs]
        for job in jobs:
            job.finish()
        for d in done:
            assert d["last_loss"] < d["first_loss"]
        stats = pool.stats()["pool"]
        assert stats["held_bytes"] == 0 and stats["peak_held_bytes"] <= 256 * MiB
    finally:
        pool.close()


def _packet(kind, a=0, b=0, c=0, ids=()):
    """One job -> agent message (layout of allocator/src/agent_protocol.hpp's Msg)."""
    ids = list(ids) + [0] * (200 - len(ids))
    return struct.pack("<IIQQQII200I192s", 0x5A494331, kind, a, b, c, len([i for i in ids if i]) if kind == 5 else 0,
                       0, *ids, b"")


@pytest.mark.timeout(60)
def test_a_hostile_job_cannot_free_or_reach_another_jobs_chunks(agent):
    pool = agent(64 * MiB, 48 * MiB)
    victim = JobProcess(pool, 1, 1, "hold", "--step-bytes", 24 * MiB)
    victim.until("held")
    fd = pool.add_job(2, 2)  # this test plays job 2 on the raw socket
    sock = socket.socket(fileno=fd)
    hello = sock.recv(4096)
    assert struct.unpack_from("<II", hello) == (0x5A494331, 1)
    fds_before = len(os.listdir("/proc/self/fd"))
    sock.sendmsg([_packet(5, ids=range(1, 12))])  # RETURN of chunks job 1 holds
    sock.send(b"garbage")
    r, w = os.pipe()  # try to plant descriptors in the agent
    sock.sendmsg([_packet(99)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [r, w]))])
    os.close(r)
    os.close(w)
    sock.sendmsg([_packet(2, a=1 << 40, b=1, c=7)])  # more than the capacity
    refusal = sock.recv(4096)
    _, kind, reason = struct.unpack_from("<IIQ", refusal)
    assert kind == 4 and reason == 3  # REFUSE, capacity
    stats = pool.stats()
    assert stats["jobs"][1]["held_bytes"] == 24 * MiB and stats["jobs"][2]["bad_messages"] == 13
    assert len(os.listdir("/proc/self/fd")) == fds_before  # the planted fds were closed on receipt
    pool.remove_job(2)
    assert sock.recv(4096) == b""  # the agent closed it
    sock.close()
    victim.finish()


@pytest.mark.timeout(60)
def test_remove_job_takes_chunks_back_and_quarantines_them(agent):
    pool = agent(STEP)
    job = JobProcess(pool, 1, 1, "hold", "--step-bytes", STEP)
    job.until("held")
    pool.remove_job(1)  # the process still runs and still maps the chunks
    stats = pool.stats()
    assert stats["pool"]["held_bytes"] == 0 and not stats["jobs"][1]["connected"]
    reader = JobProcess(pool, 2, 1, "read", "--step-bytes", STEP)  # same tenant, yet scrubbed
    seen = reader.until("nonzero")
    reader.finish()
    job.finish()
    assert seen["nonzero"] == 0 and pool.stats()["pool"]["scrubs"] == 6


def test_bad_arguments_and_malformed_chunk_knob():
    with pytest.raises(ValueError):
        za.AgentPool(0)
    with pytest.raises(za.ZicoError, match="multiple of 4096"):
        za.AgentPool(64 * MiB, None, 1000)
    with za.AgentPool(64 * MiB) as pool:
        with pytest.raises(ValueError):
            pool.add_job(0, 1)
        fd = pool.add_job(1, 1)
        with pytest.raises(za.ZicoError, match="already connected"):
            pool.add_job(1, 1)
        from zico_allocator import _native

        with pytest.raises(za.ZicoError, match="yielding must be 0, 1 or 2, got 3"):
            _native.check(_native.lib().zico_agent_set_yielding(pool._h(), 1, 3))  # the C ABI's own check
        os.close(fd)
        with pytest.raises(za.ZicoError, match="never added"):
            pool.remove_job(99)
    code = ("import zico_allocator as za\n"
            "try:\n    za.AgentPool(64 << 20)\nexcept za.ZicoError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, ZICO_AGENT_CHUNK_BYTES="2 megs"),
                         capture_output=True, text=True, timeout=60).stdout
    assert "ZICO_AGENT_CHUNK_BYTES" in out and "2M" in out
    out = subprocess.run([sys.executable, "-c", "import zico_allocator as za\nwith za.AgentPool(64 << 20) as p:\n"
                          "    print(p.stats()['pool']['chunk_bytes'])\n"],
                         env=dict(os.environ, ZICO_AGENT_CHUNK_BYTES="4M"), capture_output=True, text=True,
                         timeout=60).stdout
    assert out.strip() == str(4 * MiB)


@pytest.mark.timeout(60)
def test_a_job_never_holds_more_than_its_own_budget_and_its_neighbour_is_untouched(agent):
    """Note [A job's own budget]: the device has room to spare (no device budget), the job a budget of 30 MiB."""
    pool = agent(256 * MiB, None, wait_s=5.0)
    steady = JobProcess(pool, 1, 1, "ramp", "--iterations", 10, "--steps", 3, "--step-bytes", STEP)
    leaker = JobProcess(pool, 2, 1, "script", "--step-bytes", STEP)
    pool.set_job_budget(2, 30 * MiB)
    answers = []
    for _ in range(3):
        leaker.send("alloc")
        answers.append(leaker.until("alloc"))
    steady_done = steady.until("done", timeout=50)
    stats = pool.stats()
    leaker.send("exit")
    steady.finish()
    assert leaker.proc.wait(30) == 0
    print({"answers": answers, "leaker": stats["jobs"][2]})
    assert [a["alloc"] for a in answers] == [True, True, False]  # 24 MiB held; 36 would pass its 30
    assert "job budget" in answers[2]["detail"] and "past its budget of 30.0 MiB" in answers[2]["detail"]
    assert "its peak 24.0 MiB" in answers[2]["detail"]
    assert stats["jobs"][2]["peak_held_bytes"] == 24 * MiB and stats["jobs"][2]["over_job_budget"] == 1
    assert stats["jobs"][2]["job_budget_bytes"] == 30 * MiB
    assert steady_done["done"] == 10 and steady_done["ooms"] == 0  # the neighbour never noticed
    assert stats["pool"]["deadlock_grants"] == 0


def test_a_job_budget_must_be_positive_and_for_a_known_job(agent):
    pool = agent(64 * MiB)
    fd = pool.add_job(3, 1)
    os.close(fd)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="budget_bytes must be a positive int"):
            pool.set_job_budget(3, bad)
    with pytest.raises(za.ZicoError, match="no job 4"):
        pool.set_job_budget(4, MiB)
    pool.set_job_budget(3, None)  # back to none
    assert pool.stats()["jobs"][3]["job_budget_bytes"] == 0
