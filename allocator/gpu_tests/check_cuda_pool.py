"""GPU checks of the CUDA upstream, one per process (the pool must be installed before CUDA's first
allocation): `python allocator/gpu_tests/check_cuda_pool.py <check>`; exit status 0 = pass.
Run by tests/allocator/test_allocator_cuda_gpu.py (gpu-marked) on a machine with an NVIDIA GPU.

Checks:
  install        install through CUDAPluggableAllocator before first CUDA use; tensors and a short
                 training run are served and accounted by the Zico pool
  stream_rule    a block freed on stream S1 while S1 is still busy serves stream S2 at once, and S2's
                 work runs only after S1's (S2 waits on the event recorded at the free)
  two_jobs       two jobs on two streams (two threads) share the pool: one job's freed block serves
                 the other; per-job figures add up to the totals
  budget         the device budget is enforced (torch.OutOfMemoryError, reason "budget"), the budget
                 changes at run time, and a request beyond physical memory fails with "capacity"
"""
import sys
import threading
import time

import torch

import zico_allocator as za

MiB = 1 << 20


def check_install():
    za.install_cuda(0)
    x = torch.randn(1024, 1024, device="cuda")
    stats = za.memory_stats(device=0)
    assert stats["allocated_bytes.all.current"] >= 4 * MiB, stats
    assert za.memory_snapshot(0), "no segments in the snapshot"
    del x
    torch.cuda.synchronize()
    assert za.memory_stats(device=0)["allocated_bytes.all.current"] == 0
    with za.bind(1):
        model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1)).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        data, target = torch.randn(512, 256, device="cuda"), torch.randn(512, 1, device="cuda")
        losses = []
        for it in range(30):
            za.mark(1, "iteration_start", it)
            loss = torch.nn.functional.mse_loss(model(data), target)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
            za.mark(1, "iteration_end", it)
    assert losses[-1] < losses[0], losses
    assert za.memory_stats(job=1, device=0)["allocated_bytes.all.peak"] > 0
    kinds = {r.kind for r in za.drain_trace() if r.device == 0}
    assert {"alloc", "free", "segment_alloc", "iteration_start"} <= kinds, kinds
    za.check_invariants(0)


def check_stream_rule():
    za.install_cuda(0)
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    n = 8 * MiB // 4
    # Every kernel the scenario launches runs once first. With CUDA's lazy module loading (the default
    # since CUDA 12), the first launch of a kernel loads its module, which may wait for the device —
    # here for S1's sleep. The first H200 run saw the host blocked for the whole sleep somewhere
    # between the launch and S2's allocation; fill_'s first launch is the likely culprit (unverified).
    for stream in (s1, s2):
        with torch.cuda.stream(stream):
            torch.cuda._sleep(1)
            w = torch.empty(n, device="cuda")
            w.fill_(1.0)
            assert bool((w == 1.0).all())
            del w
    torch.cuda.synchronize()
    for it in range(3):
        steps = {}  # host seconds of each step, to name the one that blocks if S1 is done too early
        with torch.cuda.stream(s1):
            x = torch.empty(n, device="cuda")
            t = launched = time.monotonic()
            torch.cuda._sleep(1_000_000_000)  # keeps S1 busy ~0.5 s (1e9 cycles at the H200's 1.98 GHz)
            steps["sleep launch"], t = time.monotonic() - t, time.monotonic()
            busy_after_launch = not s1.query()
            x.fill_(1.0)
            steps["fill"], t = time.monotonic() - t, time.monotonic()
            ptr = x.data_ptr()
            del x  # freed on S1 while S1's fill is still queued
            steps["free"], t = time.monotonic() - t, time.monotonic()
        with torch.cuda.stream(s2):
            start = time.monotonic()
            y = torch.empty(n, device="cuda")
            alloc_s = steps["S2 alloc"] = time.monotonic() - start
            assert y.data_ptr() == ptr, "the block freed on S1 was not reused by S2"
            assert not s1.query(), (
                f"iteration {it}: S1 finished too early ({time.monotonic() - launched:.3f} s after its sleep was "
                f"launched; busy right after the launch: {busy_after_launch}; host seconds per step: "
                + ", ".join(f"{k} {v:.4f}" for k, v in steps.items())
                + "): the scenario did not test a pending event")
            y.fill_(2.0)
        torch.cuda.synchronize()
        assert alloc_s < 0.05, f"the CPU blocked {alloc_s:.3f} s: the rule must wait on the GPU, not the host"
        assert bool((y == 2.0).all()), "S2 reused the block before S1's work on it finished"
        del y
    za.check_invariants(0)


def check_two_jobs():
    za.install_cuda(0)
    torch.cuda.init()
    results, errors = {}, []
    barrier = threading.Barrier(2)

    def job(job_id, size):
        try:
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream), za.bind(job_id):
                x = torch.empty(size, dtype=torch.uint8, device="cuda")
                results[job_id] = x.data_ptr()
                barrier.wait()
                results[(job_id, "stats")] = za.memory_stats(job=job_id, device=0)["allocated_bytes.all.current"]
                barrier.wait()
                if job_id == 1:
                    del x
                    stream.synchronize()
                barrier.wait()
                if job_id == 2:
                    y = torch.empty(16 * MiB, dtype=torch.uint8, device="cuda")
                    results["reused"] = y.data_ptr()
                    del y
                    stream.synchronize()
        except Exception as exc:  # reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=job, args=(1, 16 * MiB)), threading.Thread(target=job, args=(2, 2 * MiB))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert results[(1, "stats")] == 16 * MiB and results[(2, "stats")] == 2 * MiB, results
    assert results["reused"] == results[1], "job 2 did not reuse the block job 1 freed"
    totals = za.memory_stats(device=0)
    jobs = za.jobs(0)
    assert sum(j["allocated_bytes"] for j in jobs.values()) == totals["allocated_bytes.all.current"]
    assert sum(j["reserved_bytes"] for j in jobs.values()) == totals["reserved_bytes.all.current"]
    za.check_invariants(0)


def check_budget():
    za.install_cuda(0)
    za.set_budget(64 * MiB, device=0)
    za.set_budget_wait(0.0, device=0)
    held = []
    # 20 MiB requests fill 20 MiB segments exactly (a request of 10 MiB or more gets a segment of
    # its own size), so nothing is cached when the budget stops the fourth: the reason is "budget".
    # (8 MiB requests would leave 4 MiB in each 20 MiB segment, and the cached 12 MiB would make the
    # reason "fragmentation", by Note [Budget rule].)
    try:
        while True:
            held.append(torch.empty(20 * MiB, dtype=torch.uint8, device="cuda"))
            assert len(held) < 64, "the budget was never enforced"
    except torch.OutOfMemoryError:
        pass
    assert len(held) == 3, len(held)
    assert za.last_oom(0)["reason"] == "budget", za.last_oom(0)
    assert za.memory_stats(device=0)["reserved_bytes.all.current"] <= 64 * MiB
    za.set_budget(128 * MiB, device=0)  # raised at run time: room again
    held.append(torch.empty(8 * MiB, dtype=torch.uint8, device="cuda"))
    del held
    za.set_budget(None, device=0)
    capacity = za.memory_stats(device=0)["capacity_bytes"]
    try:
        torch.empty(capacity + 1024 * MiB, dtype=torch.uint8, device="cuda")
        raise AssertionError("a request beyond physical memory succeeded")
    except torch.OutOfMemoryError:
        pass
    assert za.last_oom(0)["reason"] == "capacity"
    torch.empty(MiB, device="cuda")  # the pool still works after the failure
    za.check_invariants(0)


CHECKS = {"install": check_install, "stream_rule": check_stream_rule, "two_jobs": check_two_jobs,
          "budget": check_budget}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CHECKS:
        sys.exit(f"usage: check_cuda_pool.py {{{'|'.join(CHECKS)}}}")
    CHECKS[sys.argv[1]]()
    print(f"{sys.argv[1]}: ok")
