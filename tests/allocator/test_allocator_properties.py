"""Property tests through the C ABI: random alloc/free sequences issued from 4 OS threads bound to
3 jobs, with the invariants checked after every step — live blocks never overlap, reserved <= budget,
per-job sums equal the totals, and memory one job frees is reused by another before the pool grows.
A second test runs the same mix truly concurrently while a checker thread audits the pool."""
import ctypes
import itertools
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import zico_allocator as za
from zico_allocator import _native

MiB = 1 << 20
THREAD_JOBS = [1, 2, 3, 1]  # 4 threads, 3 jobs
SIZES = st.one_of(st.integers(1, 4096), st.integers(4097, MiB), st.integers(MiB + 1, 24 * MiB))


def _executors():
    def make(job):
        ex = ThreadPoolExecutor(max_workers=1)
        ex.submit(lambda: za.bind(job).__enter__()).result()  # the worker thread stays bound
        return ex
    return [make(job) for job in THREAD_JOBS]


class PoolMachine(RuleBasedStateMachine):
    device = None
    workers = None

    @initialize()
    def start(self):
        cls = type(self)
        if cls.device is None:
            cls.device = 60
            za.install_host_pool(cls.device, 256 * MiB)
            za.set_budget_wait(0.0, device=cls.device)
            cls.workers = _executors()
        self.lib = _native.lib()
        self.live = {}  # ptr -> (size, block, job, tag)
        self.budget = None
        za.set_budget(None, device=self.device)
        za.empty_cache(self.device)
        assert self.stats()["reserved_bytes.all.current"] == 0, "previous example leaked"

    def teardown(self):
        for ptr in list(self.live):
            self.lib.zico_free(ptr, 0, self.device, None)
        za.empty_cache(self.device)

    def stats(self, job=None):
        return za.memory_stats(job=job, device=self.device)

    def on_thread(self, index, fn):
        return self.workers[index].submit(fn).result()

    def free_blocks(self):
        return [(b["address"], b["size"], seg["segment_type"]) for seg in za.memory_snapshot(self.device)
                for b in seg["blocks"] if b["state"] == "inactive"]

    def do_alloc(self, thread, size):
        block = 512 * max(1, -(-size // 512))
        kind = "small" if block <= MiB else "large"
        free_before = [f for f in self.free_blocks() if f[2] == kind and f[1] >= block]
        reserved_before = self.stats()["reserved_bytes.all.current"]
        ptr = self.on_thread(thread, lambda: self.lib.zico_malloc(size, self.device, None))
        if not ptr:
            assert not free_before, "a fitting cached block existed but the request failed"
            assert za.last_oom(self.device)["reason"] in ("budget", "capacity", "fragmentation")
            return None
        if free_before:
            # Reuse: served from cached memory (whoever freed it), the pool did not grow.
            assert self.stats()["reserved_bytes.all.current"] <= reserved_before
            assert any(a <= ptr and ptr + block <= a + s for a, s, _ in free_before)
        actual = [b["size"] for seg in za.memory_snapshot(self.device) for b in seg["blocks"] if b["address"] == ptr]
        assert actual and actual[0] >= block  # a large block keeps a remainder of <= 1 MiB unsplit
        block = actual[0]
        for other, (osize, oblock, _, _) in self.live.items():
            assert ptr + block <= other or other + oblock <= ptr, "live blocks overlap"
        tag = random.randrange(1, 255)
        ctypes.memset(ptr, tag, min(size, 64))
        self.live[ptr] = (size, block, THREAD_JOBS[thread], tag)
        return ptr

    def do_free(self, thread, ptr):
        size, _, _, tag = self.live.pop(ptr)
        assert ctypes.string_at(ptr, min(size, 64)) == bytes([tag]) * min(size, 64), "block was overwritten"
        self.on_thread(thread, lambda: self.lib.zico_free(ptr, 0, self.device, None))

    @rule(thread=st.integers(0, 3), size=SIZES)
    def alloc(self, thread, size):
        self.do_alloc(thread, size)

    @precondition(lambda self: self.live)
    @rule(thread=st.integers(0, 3), data=st.data())
    def free(self, thread, data):
        ptr = data.draw(st.sampled_from(sorted(self.live)))
        self.do_free(thread, ptr)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def another_job_reuses_a_freed_block(self, data):
        ptr = data.draw(st.sampled_from(sorted(self.live)))
        size, _, job, _ = self.live[ptr]
        owner = THREAD_JOBS.index(job)
        other = next(i for i, j in enumerate(THREAD_JOBS) if j != job)
        self.do_free(owner, ptr)
        reserved = self.stats()["reserved_bytes.all.current"]
        new = self.do_alloc(other, size)
        assert new is not None, "a block just freed by one job was refused to another"
        assert self.stats()["reserved_bytes.all.current"] == reserved
        assert self.live[new][2] != job

    @rule(extra=st.integers(0, 64 * MiB), unlimited=st.booleans())
    def set_budget(self, extra, unlimited):
        reserved = self.stats()["reserved_bytes.all.current"]
        self.budget = None if unlimited else max(MiB, reserved + extra)
        za.set_budget(self.budget, device=self.device)

    @rule()
    def empty_cache(self):
        za.empty_cache(self.device)

    @invariant()
    def pool_invariants_hold(self):
        if self.device is None or not hasattr(self, "live"):
            return
        za.check_invariants(self.device)  # block structure, no overlap, per-job sums, reserved sums
        total = self.stats()
        assert total["allocated_bytes.all.current"] == sum(b for _, b, _, _ in self.live.values())
        per_job = {j: self.stats(job=j)["allocated_bytes.all.current"] for j in (0, 1, 2, 3)}
        for j in (1, 2, 3):
            assert per_job[j] == sum(b for _, b, jj, _ in self.live.values() if jj == j)
        assert sum(per_job.values()) == total["allocated_bytes.all.current"]
        reserved = {j: self.stats(job=j)["reserved_bytes.all.current"] for j in (0, 1, 2, 3)}
        assert sum(reserved.values()) == total["reserved_bytes.all.current"]
        if self.budget is not None:
            assert total["reserved_bytes.all.current"] <= self.budget


PoolMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None,
                                         suppress_health_check=[HealthCheck.too_slow])
test_pool_state_machine = PoolMachine.TestCase


def test_memory_freed_by_one_job_serves_another(make_pool):
    pool = make_pool()
    with za.bind(1):
        p = pool.malloc(3 * MiB)
    with za.bind(1):
        pool.free(p)
    with za.bind(2):
        q = pool.malloc(3 * MiB)
    assert q == p
    assert pool.stats()["num_device_alloc"] == 1
    assert pool.stats(job=2)["allocated_bytes.all.current"] == 3 * MiB
    assert pool.stats(job=1)["allocated_bytes.all.current"] == 0
    pool.free(q)


@pytest.mark.parametrize("seed", [1, 2])
def test_concurrent_threads_keep_the_invariants(make_pool, seed):
    budget = 96 * MiB
    pool = make_pool(capacity_bytes=256 * MiB, budget_bytes=budget)
    errors, stop = [], threading.Event()
    barrier = threading.Barrier(5)

    def work(index):
        rng = random.Random(seed * 100 + index)
        live = []
        with za.bind(THREAD_JOBS[index]):
            barrier.wait()
            for _ in range(1500):
                if rng.random() < 0.55 or not live:
                    size = int(2 ** rng.uniform(9, 23))
                    ptr = pool.malloc(size)
                    if ptr:
                        tag = rng.randrange(1, 255)
                        ctypes.memset(ptr, tag, min(size, 64))
                        live.append((ptr, size, tag))
                else:
                    ptr, size, tag = live.pop(rng.randrange(len(live)))
                    if ctypes.string_at(ptr, min(size, 64)) != bytes([tag]) * min(size, 64):
                        errors.append("a live block was overwritten")
                    pool.free(ptr)
            for ptr, _, _ in live:
                pool.free(ptr)

    def audit():
        barrier.wait()
        while not stop.is_set():
            try:
                pool.check()
                stats = pool.stats()
                if stats["reserved_bytes.all.current"] > budget:
                    errors.append(f"reserved {stats['reserved_bytes.all.current']} over budget")
            except za.ZicoError as exc:
                errors.append(str(exc))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    checker = threading.Thread(target=audit)
    for t in itertools.chain(threads, [checker]):
        t.start()
    for t in threads:
        t.join(timeout=120)
    stop.set()
    checker.join(timeout=30)
    assert not errors, errors[:5]
    pool.check()
    stats = pool.stats()
    assert stats["allocated_bytes.all.current"] == 0
    assert stats["allocation.all.allocated"] > 1000
    assert sum(pool.stats(job=j)["allocation.all.allocated"] for j in (1, 2, 3)) == stats["allocation.all.allocated"]
