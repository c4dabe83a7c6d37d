"""The budget and deadlock rules with jobs in threads: a blocked job waits for another job's frees;
two jobs in lockstep under a budget between one job's peak and the sum of both peaks both keep making
progress (the deadlock rule lets the furthest one past); a lone job over budget fails at once."""
import threading
import time

import pytest

import zico_allocator as za

MiB = 1 << 20
STEP = 4 * MiB          # one "activation"
STEPS = 20              # per forward pass: a job's peak is 20 x 4 MiB in four 20 MiB segments


def run_iteration(pool, job, iteration, barrier=None, pace_s=0.0):
    """Forward allocates STEPS blocks (marking), backward frees them; returns the failed mallocs.
    With a barrier, jobs start each iteration together and pace their steps: lockstep."""
    if barrier:
        barrier.wait()
    za.mark(job, "iteration_start", iteration)
    za.mark(job, "forward", iteration)
    held, failures = [], 0
    for _ in range(STEPS):
        time.sleep(pace_s)
        ptr = pool.malloc(STEP)
        if ptr:
            held.append(ptr)
        else:
            failures += 1
    za.mark(job, "backward", iteration)
    for ptr in reversed(held):
        pool.free(ptr)
    za.mark(job, "iteration_end", iteration)
    return failures


@pytest.mark.timeout(120)
def test_two_jobs_in_lockstep_both_progress_under_a_tight_budget(make_pool):
    # Warm-up alone: one job's peak reserved (two 20 MiB segments).
    solo = make_pool(capacity_bytes=512 * MiB)
    with za.bind(1):
        run_iteration(solo, 1, 0)
    solo_peak = solo.stats()["reserved_bytes.all.peak"]
    budget = solo_peak + solo_peak // 2  # between one peak and the sum of two: 6 segments, 30 blocks,
    # so both jobs block at their 16th step with the pool full — a true deadlock without the rule
    pool = make_pool(capacity_bytes=512 * MiB, budget_bytes=budget, wait_s=30.0)
    iterations, done, failures = 10, {1: 0, 2: 0}, []
    barrier = threading.Barrier(2, timeout=60)

    def job(job_id):
        with za.bind(job_id):
            for it in range(iterations):
                failures.append(run_iteration(pool, job_id, it, barrier, pace_s=0.002))
                done[job_id] += 1

    threads = [threading.Thread(target=job, args=(j,), daemon=True) for j in (1, 2)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)
    assert not any(t.is_alive() for t in threads), f"jobs hung: done={done}"
    assert done == {1: iterations, 2: iterations} and sum(failures) == 0
    stats = pool.stats()
    assert stats["num_budget_waits"] >= 1 and stats["num_budget_overruns"] >= 1  # the rule fired
    assert stats["num_ooms"] == 0
    assert stats["reserved_bytes.all.peak"] <= 2 * solo_peak
    assert time.monotonic() - start < 30  # never sat out the 30 s wait bound
    pool.check()  # back under the budget once frees came: no cached segment above it


@pytest.mark.timeout(60)
def test_a_blocked_job_waits_for_another_jobs_free(make_pool):
    pool = make_pool(budget_bytes=40 * MiB, wait_s=20.0)
    with za.bind(1):
        za.mark(1, "iteration_start", 0)
        a = pool.malloc(16 * MiB)  # 16 MiB segment
        b = pool.malloc(16 * MiB)  # 16 MiB segment: 32 MiB reserved
    got = {}

    def second():
        with za.bind(2):
            za.mark(2, "iteration_start", 0)
            got["ptr"] = pool.malloc(16 * MiB)  # would make 48 MiB: waits
            got["t"] = time.monotonic()

    t = threading.Thread(target=second, daemon=True)
    t.start()
    time.sleep(0.3)
    assert "ptr" not in got  # still waiting: job 1 is live and not waiting
    freed_at = time.monotonic()
    pool.free(b)
    t.join(timeout=10)
    assert got["ptr"] == b and got["t"] >= freed_at  # served by job 1's free, no overrun
    assert pool.stats()["num_budget_overruns"] == 0 and pool.stats(job=2)["num_budget_waits"] == 1
    pool.free(a)
    pool.free(got["ptr"])
    za.mark(1, "iteration_end", 0)
    za.mark(2, "iteration_end", 0)


@pytest.mark.timeout(60)
def test_a_lone_job_over_budget_fails_at_once_with_reason_budget(make_pool):
    pool = make_pool(budget_bytes=20 * MiB, wait_s=20.0)
    with za.bind(5):
        za.mark(5, "iteration_start", 0)
        a = pool.malloc(12 * MiB)
        start = time.monotonic()
        assert not pool.malloc(12 * MiB)  # nobody else could free: no point waiting
        assert time.monotonic() - start < 1.0
        pool.free(a)
        za.mark(5, "iteration_end", 0)
    assert za.last_oom(pool.device)["reason"] == "budget"


@pytest.mark.timeout(60)
def test_the_wait_is_bounded(make_pool):
    pool = make_pool(budget_bytes=20 * MiB, wait_s=0.3)
    with za.bind(1):
        za.mark(1, "iteration_start", 0)
        a = pool.malloc(12 * MiB)  # job 1 stays live and never frees during the test
    result = {}

    def second():
        with za.bind(2):
            start = time.monotonic()
            result["ptr"] = pool.malloc(12 * MiB)  # never marked: live while holding memory/waiting
            result["waited"] = time.monotonic() - start

    t = threading.Thread(target=second, daemon=True)
    t.start()
    t.join(timeout=10)
    assert result["ptr"] is None or result["ptr"] == 0
    assert 0.25 <= result["waited"] < 5
    assert za.last_oom(pool.device)["reason"] == "budget"
    pool.free(a)
    za.mark(1, "iteration_end", 0)
