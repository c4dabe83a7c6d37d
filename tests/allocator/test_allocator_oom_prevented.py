"""OOM prevented (Note [OOM prevented] in workers/oom_watch.py) counted from the real allocator's per-job
counters: a budget wait that ends in success counts once, a wait still in progress or one that ends in an
out-of-memory error does not."""
import threading
import time

import zico_allocator as za
from workers.oom_watch import OomWatch

MiB = 1 << 20


def _wait_until(pred, timeout=10.0):
    """Wait for an allocator state change (the allocator has no callback to wait on)."""
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "allocator state not reached"
        time.sleep(0.01)


def _waiting(pool, job):
    return bool(za.jobs(device=pool.device).get(job, {}).get("waiting"))


def test_a_wait_that_ends_in_success_counts_once_and_a_wait_in_progress_not_yet(make_pool):
    pool = make_pool(budget_bytes=40 * MiB, wait_s=20.0)
    watch = OomWatch()
    with za.bind(1):
        za.mark(1, "iteration_start", 0)
        a = pool.malloc(16 * MiB)
        b = pool.malloc(16 * MiB)  # 32 MiB reserved of 40
    got = {}

    def second():
        with za.bind(2):
            za.mark(2, "iteration_start", 0)
            got["ptr"] = pool.malloc(16 * MiB)  # would make 48 MiB: waits for job 1

    t = threading.Thread(target=second, daemon=True)
    t.start()
    _wait_until(lambda: _waiting(pool, 2))
    assert watch.check(za, [1, 2], pool.device) == []  # still waiting: not counted yet
    pool.free(b)
    t.join(timeout=10)
    assert got["ptr"]
    [report] = watch.check(za, [1, 2], pool.device)
    assert (report["job"], report["count"], report["overruns"]) == (2, 1, 0)
    assert report["waited_s"] > 0
    assert watch.check(za, [1, 2], pool.device) == []  # reported once
    for p in (a, got["ptr"]):
        pool.free(p)
    za.mark(1, "iteration_end", 0)
    za.mark(2, "iteration_end", 0)


def test_a_wait_that_ends_in_an_oom_is_not_counted(make_pool):
    pool = make_pool(budget_bytes=20 * MiB, wait_s=0.2)
    watch = OomWatch()
    with za.bind(5):
        za.mark(5, "iteration_start", 0)
        held = pool.malloc(12 * MiB)
    result = {}

    def second():
        with za.bind(6):
            za.mark(6, "iteration_start", 0)
            result["ptr"] = pool.malloc(12 * MiB)  # job 5 never frees: the wait times out

    t = threading.Thread(target=second, daemon=True)
    t.start()
    t.join(timeout=10)
    assert not result["ptr"] and pool.stats(job=6)["num_budget_waits"] == 1 and pool.stats(job=6)["num_ooms"] == 1
    assert watch.check(za, [5, 6], pool.device) == []
    pool.free(held)
    za.mark(5, "iteration_end", 0)
    za.mark(6, "iteration_end", 0)
