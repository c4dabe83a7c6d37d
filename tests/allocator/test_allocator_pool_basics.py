"""The pool through the C ABI: PyTorch's size rounding, best-fit reuse, splitting and coalescing,
torch-style statistics, the snapshot, the trace, the OOM reasons, and misuse raising errors."""
import shutil
import subprocess
import sys

import pytest

import zico_allocator as za

MiB = 1 << 20


def test_it_rounds_requests_like_pytorch(make_pool):
    pool = make_pool()
    for size, block in [(1, 512), (512, 512), (513, 1024), (1000, 1024), (MiB, MiB)]:
        p = pool.malloc(size)
        assert p and p % 512 == 0
        assert pool.stats()["allocated_bytes.all.current"] == block
        assert pool.stats()["requested_bytes.all.current"] == size
        pool.free(p)
    assert pool.stats()["reserved_bytes.small_pool.current"] == 2 * MiB  # one 2 MiB small segment


def test_it_sizes_segments_like_pytorch(make_pool):
    pool = make_pool()
    a = pool.malloc(3 * MiB)  # (1 MiB, 10 MiB) -> a 20 MiB large segment
    assert pool.stats()["reserved_bytes.large_pool.current"] == 20 * MiB
    b = pool.malloc(17 * MiB + 1)  # >= 10 MiB, no 17 MiB+ remainder: own segment rounded to 2 MiB
    assert pool.stats()["reserved_bytes.large_pool.current"] == 20 * MiB + 18 * MiB
    pool.free(a)
    pool.free(b)
    pool.check()


def test_it_reuses_a_freed_block_without_growing(make_pool):
    pool = make_pool()
    p = pool.malloc(5 * MiB)
    reserved = pool.stats()["reserved_bytes.all.current"]
    pool.free(p)
    q = pool.malloc(5 * MiB)
    assert q == p
    assert pool.stats()["reserved_bytes.all.current"] == reserved
    assert pool.stats()["num_device_alloc"] == 1
    pool.free(q)


def test_it_splits_and_coalesces_blocks(make_pool):
    pool = make_pool()
    ptrs = [pool.malloc(4096) for _ in range(3)]
    assert ptrs[1] == ptrs[0] + 4096 and ptrs[2] == ptrs[1] + 4096  # carved from one segment
    pool.free(ptrs[0])
    pool.free(ptrs[2])
    assert pool.stats()["inactive_split.all.current"] == 2  # two free pieces around a live block
    pool.free(ptrs[1])
    snap = za.memory_snapshot(pool.device)
    assert len(snap) == 1 and len(snap[0]["blocks"]) == 1  # merged back into one free block
    assert snap[0]["blocks"][0]["state"] == "inactive"
    pool.check()


def test_best_fit_picks_the_smallest_block_that_fits(make_pool):
    pool = make_pool()
    big, sep1, small, sep2 = (pool.malloc(s) for s in (64 * 1024, 512, 8 * 1024, 512))
    pool.free(big)
    pool.free(small)
    assert pool.malloc(8 * 1024) == small
    assert pool.malloc(60 * 1024) == big


def test_small_best_fit_skips_empty_sizes_to_the_next_free_one(make_pool):
    # The small pool's bins (free_bins.hpp): the best fit for 100 KiB, with only an 8 KiB and a
    # 600 KiB block free, is the 600 KiB one, found past many empty sizes; then the tail is split off.
    pool = make_pool()
    small, sep1, big, sep2 = (pool.malloc(s) for s in (8 * 1024, 512, 600 * 1024, 512))
    pool.free(small)
    pool.free(big)
    p = pool.malloc(100 * 1024)
    assert p == big
    assert pool.malloc(500 * 1024) == big + 100 * 1024  # the split-off remainder
    assert pool.malloc(8 * 1024) == small
    assert pool.stats()["segment.all.current"] == 1
    pool.check()


def test_thousands_of_live_blocks_freed_in_random_order_stay_consistent(make_pool):
    # Enough live blocks to grow the live-pointer table (ptr_map.hpp) several times, freed in a
    # random order so that deletions shift runs of colliding entries; every block is still found.
    import random

    rng = random.Random(7)
    pool = make_pool()
    sizes = [rng.choice((512, 1024, 4096, 20_000, 300_000)) for _ in range(6000)]
    ptrs = [pool.malloc(s) for s in sizes]
    assert all(ptrs) and len(set(ptrs)) == len(ptrs)
    order = list(range(len(ptrs)))
    rng.shuffle(order)
    for i in order[: len(order) // 2]:
        pool.free(ptrs[i])
    pool.check()
    for i in order[len(order) // 2:]:
        pool.free(ptrs[i])
    s = pool.stats()
    assert s["allocated_bytes.all.current"] == 0 and s["num_invalid_frees"] == 0
    snap = za.memory_snapshot(pool.device)
    assert all(len(seg["blocks"]) == 1 for seg in snap)  # every segment coalesced back to one free block
    pool.check()


def test_stats_use_torch_names_and_count_peaks(make_pool):
    pool = make_pool()
    p = pool.malloc(2 * MiB)
    q = pool.malloc(2 * MiB)
    pool.free(p)
    s = pool.stats()
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
                "reserved_bytes.all.peak", "active_bytes.all.current", "requested_bytes.all.peak",
                "segment.all.current", "num_alloc_retries", "num_ooms", "allocation.all.allocated"):
        assert key in s
    assert s["allocated_bytes.all.peak"] == 4 * MiB and s["allocated_bytes.all.current"] == 2 * MiB
    za.reset_peak_memory_stats(pool.device)
    assert pool.stats()["allocated_bytes.all.peak"] == 2 * MiB
    pool.free(q)
    za.empty_cache(pool.device)
    assert pool.stats()["reserved_bytes.all.current"] == 0
    assert pool.stats()["num_device_free"] == 1


def test_allocations_are_charged_to_the_bound_thread_job(make_pool):
    pool = make_pool()
    with za.bind(7):
        p = pool.malloc(10_000)
        with za.bind(8):
            q = pool.malloc(20_000)
        r = pool.malloc(30_000)
    u = pool.malloc(1000)  # unbound: the unattributed account, job 0
    assert pool.stats(job=7)["allocated_bytes.all.current"] == 10240 + 30208
    assert pool.stats(job=8)["allocated_bytes.all.current"] == 20480
    assert pool.stats(job=0)["allocated_bytes.all.current"] == 1024
    assert pool.stats(job=7)["reserved_bytes.all.current"] == 2 * MiB  # its request obtained the segment
    with za.bind(8):
        pool.free(p)  # a free is charged back to the job that allocated, whoever frees
    assert pool.stats(job=7)["allocated_bytes.all.current"] == 30208
    for ptr in (q, r, u):
        pool.free(ptr)
    pool.check()


def test_trace_records_allocs_frees_segments_and_marks(make_pool):
    pool = make_pool()
    za.drain_trace()
    with za.bind(3):
        za.mark(3, "iteration_start", 0)
        p = pool.malloc(5000)
        pool.free(p)
        za.mark(3, "iteration_end", 0)
    recs = [r for r in za.drain_trace() if r.device == pool.device]
    assert [r.kind for r in recs] == ["iteration_start", "segment_alloc", "alloc", "free", "iteration_end"]
    alloc, free = recs[2], recs[3]
    assert (alloc.job, alloc.delta_bytes, alloc.job_allocated_bytes, alloc.pool_reserved_bytes) == (3, 5120, 5120, 2 * MiB)
    assert (free.delta_bytes, free.job_allocated_bytes, free.pool_allocated_bytes) == (-5120, 0, 0)
    assert all(r.iteration == 0 for r in recs)
    assert recs[0].timestamp_s <= recs[-1].timestamp_s
    assert za.jobs(pool.device)[3]["iterations"][-1]["peak_allocated_bytes"] == 5120


def test_over_budget_fails_at_once_with_reason_budget(make_pool):
    pool = make_pool(budget_bytes=4 * MiB)
    with za.bind(9):
        a = pool.malloc(1000)
        b = pool.malloc(MiB + 1)  # needs a 20 MiB segment: over the budget
    assert a and not b
    oom = za.last_oom(pool.device)
    assert oom["reason"] == "budget" and oom["requested_bytes"] == MiB + 1
    assert oom["reserved_bytes"] == 2 * MiB and oom["budget_bytes"] == 4 * MiB
    assert oom["job"] == 9 and oom["job_allocated_bytes"] == 1024
    assert pool.stats()["num_ooms"] == 1 and pool.stats(job=9)["num_ooms"] == 1
    pool.free(a)


def test_budget_first_returns_cached_segments(make_pool):
    pool = make_pool(budget_bytes=21 * MiB)
    p = pool.malloc(1000)
    pool.free(p)  # its 2 MiB small segment stays cached
    q = pool.malloc(2 * MiB)  # needs a 20 MiB segment: only fits once the cached one goes back
    assert q
    s = pool.stats()
    assert s["reserved_bytes.all.current"] == 20 * MiB and s["num_alloc_retries"] == 1
    pool.free(q)


def test_capacity_failure_returns_null_with_reason_capacity(make_pool):
    pool = make_pool(capacity_bytes=32 * MiB)
    a = pool.malloc(20 * MiB)
    assert a and not pool.malloc(16 * MiB)
    assert za.last_oom(pool.device)["reason"] == "capacity"
    pool.free(a)


def test_fragmentation_is_named_when_enough_bytes_are_cached_but_split(make_pool):
    pool = make_pool(capacity_bytes=2 * MiB)
    blocks = [pool.malloc(256 * 1024) for _ in range(8)]
    for p in blocks[::2]:
        pool.free(p)  # 1 MiB free in four 256 KiB holes
    assert not pool.malloc(512 * 1024)
    assert za.last_oom(pool.device)["reason"] == "fragmentation"
    for p in blocks[1::2]:
        pool.free(p)


def test_lowering_the_budget_returns_cached_segments_at_once(make_pool):
    pool = make_pool()
    p, q = pool.malloc(12 * MiB), pool.malloc(12 * MiB)
    pool.free(p)
    za.set_budget(12 * MiB, device=pool.device)
    assert pool.stats()["reserved_bytes.all.current"] == 12 * MiB
    assert za.get_budget(pool.device) == 12 * MiB
    pool.free(q)
    za.set_budget(None, device=pool.device)
    assert za.get_budget(pool.device) is None


def test_an_unknown_free_is_counted_not_fatal(make_pool):
    pool = make_pool()
    pool.free(12345678)
    assert pool.stats()["num_invalid_frees"] == 1


@pytest.mark.parametrize("call, exc", [
    (lambda: za.set_budget(-1, device=-1), ValueError),
    (lambda: za.set_budget_wait(-2.0, device=-1), ValueError),
    (lambda: za.bind(-3), ValueError),
    (lambda: za.mark(1, "sideways", 0), ValueError),
    (lambda: za.mark(1, "forward", -1), ValueError),
    (lambda: za.memory_stats(device="tpu:0"), ValueError),
    (lambda: za.memory_stats(device=99), ValueError),
    (lambda: za.memory_stats(device=63), za.ZicoError),
    (lambda: za.install_host_pool(70), ValueError),
])
def test_misuse_raises_a_clear_exception(call, exc):
    with pytest.raises(exc) as info:
        call()
    assert str(info.value)


def test_installing_twice_on_one_device_raises(make_pool):
    pool = make_pool()
    with pytest.raises(za.ZicoError, match="already installed"):
        za.install_host_pool(pool.device)


def test_importing_the_binding_does_not_import_torch():
    code = "import sys, zico_allocator as za; za.memory_stats; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_install_cuda_without_a_usable_gpu_raises_a_clear_error():
    if shutil.which("nvidia-smi"):
        pytest.skip("a GPU may be visible here; the gpu-marked tests cover install_cuda")
    code = ("import zico_allocator as za\n"
            "try:\n    za.install_cuda(0)\nexcept za.ZicoError as exc:\n    print('ZicoError:', exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ZicoError: ") and len(out.stdout) > 20
