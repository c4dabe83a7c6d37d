"""Agent-pool benchmark (prints figures; not a test): `python allocator/bench/bench_agent.py`.

Costs per chunk of moving memory through the device agent (docs/allocator.md, "Agent pool"), timed
inside real job processes around the C ABI calls:
  obtain   zico_malloc of a fresh segment: request + grant (fds over SCM_RIGHTS) + reserve + mmap
  touch    first write of every byte (page faults: resident pages map in; scrubbed ones are new)
  release  zico_free + zico_empty_cache: munmap + return message
for three cases — the same job again (no transfer), a transfer between two jobs of one tenant (no
scrub), and a transfer between tenants (scrub: punch hole + fresh memfd, timed in the agent) —
against a baseline measured in the same run: anonymous mmap + first touch + munmap of the same
bytes (fresh pages from the kernel, which is what a process without the agent pays).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

MiB = 1 << 20


def job_main() -> None:
    import zico_allocator as za
    from zico_allocator import _native

    za.install_agent_client()
    lib = _native.lib()
    for line in sys.stdin:
        size = int(line)
        t0 = time.perf_counter()
        p = lib.zico_malloc(size, -1, None)
        t1 = time.perf_counter()
        ctypes.memset(p, 1, size)
        t2 = time.perf_counter()
        lib.zico_free(p, 0, -1, None)
        lib.zico_empty_cache(-1)
        t3 = time.perf_counter()
        print(json.dumps({"obtain": t1 - t0, "touch": t2 - t1, "release": t3 - t2}), flush=True)


def baseline(size: int, rounds: int) -> dict:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    out = {"obtain": [], "touch": [], "release": []}
    for _ in range(rounds):
        t0 = time.perf_counter()
        p = libc.mmap(None, size, 3, 0x22, -1, 0)  # PROT_READ|WRITE, MAP_PRIVATE|ANONYMOUS
        t1 = time.perf_counter()
        ctypes.memset(p, 1, size)
        t2 = time.perf_counter()
        libc.munmap(p, size)
        t3 = time.perf_counter()
        for k, v in (("obtain", t1 - t0), ("touch", t2 - t1), ("release", t3 - t2)):
            out[k].append(v)
    return {k: statistics.median(v) for k, v in out.items()}


def run_case(tenants: tuple[int, int], alternate: bool, size: int, rounds: int, chunk: int) -> tuple[dict, dict]:
    import zico_allocator as za

    with za.AgentPool(size, None, chunk) as pool:  # one segment's worth: every round moves the same chunks
        jobs = []
        for job_id, tenant in zip((1, 2), tenants):
            fd = pool.add_job(job_id, tenant)
            env = dict(os.environ, **{za.AGENT_FD_ENV: str(fd)})
            jobs.append(subprocess.Popen([sys.executable, __file__, "--job"], pass_fds=[fd], env=env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
            os.close(fd)
        # Warm-up: the agent's memfds exist and (same-tenant cases) their pages are resident.
        for job in reversed(jobs):  # the first job measured warms up last: its first round is no transfer
            job.stdin.write(f"{size}\n")
            job.stdin.flush()
            job.stdout.readline()
        pool_before = pool.stats()["pool"]
        samples = {"obtain": [], "touch": [], "release": []}
        for r in range(rounds):
            job = jobs[r % 2] if alternate else jobs[0]
            job.stdin.write(f"{size}\n")
            job.stdin.flush()
            for k, v in json.loads(job.stdout.readline()).items():
                samples[k].append(v)
        after = pool.stats()["pool"]
        for job in jobs:
            job.stdin.close()
            job.wait(30)
        agent = {"transfers": after["transfers"] - pool_before["transfers"],
                 "scrubs": after["scrubs"] - pool_before["scrubs"],
                 "scrub_s": after["scrub_s"] - pool_before["scrub_s"]}
        return {k: statistics.median(v) for k, v in samples.items()}, agent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mib", type=int, default=64, help="segment size per round (MiB)")
    ap.add_argument("--rounds", type=int, default=12)
    args = ap.parse_args()
    if args.job:
        job_main()
        return 0
    chunk = 2 * MiB
    size = args.mib * MiB
    n = size // chunk
    base = baseline(size, args.rounds)
    rows = [("mmap+touch+munmap (baseline)", base, None)]
    for name, tenants, alternate in (("agent, same job again", (1, 1), False),
                                     ("agent, transfer, same tenant", (1, 1), True),
                                     ("agent, transfer, other tenant", (1, 2), True)):
        med, agent = run_case(tenants, alternate, size, args.rounds, chunk)
        rows.append((name, med, agent))
    print(f"## per 2 MiB chunk, {args.mib} MiB segments, median of {args.rounds} rounds (microseconds)")
    print(f"{'case':32} {'obtain':>8} {'touch':>8} {'release':>8} {'total':>8} {'vs base':>8}  agent")
    base_total = sum(base.values())
    for name, med, agent in rows:
        total = sum(med.values())
        us = {k: v / n * 1e6 for k, v in med.items()}
        extra = ""
        if agent is not None:
            per_scrub = agent["scrub_s"] / agent["scrubs"] * 1e6 if agent["scrubs"] else 0.0
            extra = f"transfers {agent['transfers']}, scrubs {agent['scrubs']} ({per_scrub:.1f} us each)"
        print(f"{name:32} {us['obtain']:8.1f} {us['touch']:8.1f} {us['release']:8.1f} {total / n * 1e6:8.1f}"
              f" {total / base_total:7.2f}x  {extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
