"""A job process for the agent-pool tests: installs the agent client on the fd in ZICO_AGENT_FD and
allocates from the host pool with the C ABI (zico_malloc), or with torch through the CPU shim.
Prints one JSON object per line on stdout (events the test waits on); reads commands on stdin.

    python agent_job.py ramp --iterations 6 --steps 4 --step-bytes 12582912 --job 1
    python agent_job.py greedy|write|read|hold|raise-budget|torch ...
"""
import argparse
import ctypes
import json
import sys

import zico_allocator as za
from zico_allocator import _native

HOST = -1


def say(**event):
    print(json.dumps(event), flush=True)


def wait_for(word):
    line = sys.stdin.readline().strip()
    if line != word:
        raise SystemExit(f"expected {word!r} on stdin, got {line!r}")


def run_ramp(lib, args):
    """Iterations of a forward ramp (steps blocks, each written) and a backward that frees them. A
    refused allocation (an out-of-memory error) frees the iteration's blocks and retries it."""
    ooms = 0
    it = 0
    while it < args.iterations:
        za.mark(args.job, "iteration_start", it)
        held, failed = [], False
        for _ in range(args.steps):
            p = lib.zico_malloc(args.step_bytes, HOST, None)
            if not p:
                failed = True
                break
            ctypes.memset(p, it & 0xFF, args.step_bytes)  # first touch: the pages are really used
            held.append(p)
        for p in reversed(held):
            lib.zico_free(p, 0, HOST, None)
        za.mark(args.job, "iteration_end", it)
        if failed:
            ooms += 1
            say(oom=it, detail=(za.last_oom(HOST) or {}).get("detail"))
            if ooms > args.max_ooms:
                break
            continue
        say(iteration=it)
        it += 1
    stats = za.memory_stats(device=HOST)
    say(done=it, ooms=ooms, peak_reserved=stats["reserved_bytes.all.peak"])
    wait_for("exit")  # keeps its cached segments until told


def run_greedy(lib, args):
    """Allocates step_bytes blocks and never frees; after each refusal keeps retrying, up to
    max_ooms refusals; reports the bytes it holds."""
    held, refusals = 0, 0
    while refusals < args.max_ooms:
        p = lib.zico_malloc(args.step_bytes, HOST, None)
        if p:
            ctypes.memset(p, 1, args.step_bytes)
            held += args.step_bytes
        else:
            refusals += 1
            say(refused=refusals, held=held, detail=(za.last_oom(HOST) or {}).get("detail"))
    say(done=True, held=held, reserved=za.memory_stats(device=HOST)["reserved_bytes.all.current"])
    wait_for("exit")


def run_write(lib, args):
    p = lib.zico_malloc(args.step_bytes, HOST, None)
    ctypes.memset(p, 0xAB, args.step_bytes)
    lib.zico_free(p, 0, HOST, None)
    za.empty_cache(HOST)  # the chunks go back to the agent
    say(written=args.step_bytes)
    wait_for("exit")


def run_read(lib, args):
    p = lib.zico_malloc(args.step_bytes, HOST, None)
    data = ctypes.string_at(p, args.step_bytes)
    say(nonzero=sum(1 for b in data if b != 0), ab=data.count(b"\xab"), size=len(data))
    lib.zico_free(p, 0, HOST, None)


def run_hold(lib, args):
    p = lib.zico_malloc(args.step_bytes, HOST, None)
    ctypes.memset(p, 3, args.step_bytes)
    say(held=args.step_bytes)
    wait_for("exit")


def run_script(lib, args):
    """Commands on stdin, one per line, each answered by one event: "alloc [bytes]" (one block of
    step_bytes, or of the bytes given; the answer comes once the agent granted or refused), "free"
    (every block), "stats" (this pool's reserved bytes and segments, and whether every held block still
    holds what was written to it), "exit"."""
    held = []
    for line in sys.stdin:
        cmd, _, size = line.strip().partition(" ")
        if cmd == "alloc":
            nbytes = int(size or args.step_bytes)
            p = lib.zico_malloc(nbytes, HOST, None)
            if p:
                ctypes.memset(p, 5, nbytes)
                held.append((p, nbytes))
            say(alloc=bool(p), blocks=len(held), detail=None if p else (za.last_oom(HOST) or {}).get("detail"))
        elif cmd == "free":
            for p, _ in reversed(held):
                lib.zico_free(p, 0, HOST, None)
            held.clear()
            say(freed=True, reserved=za.memory_stats(device=HOST)["reserved_bytes.all.current"])
        elif cmd == "stats":
            stats = za.memory_stats(device=HOST)
            say(reserved=stats["reserved_bytes.all.current"], segments=stats["segment.all.current"],
                intact=all(ctypes.string_at(p, n) == b"\x05" * n for p, n in held))
        elif cmd == "exit":
            return


def run_fork(lib, args):
    """Forks while holding a block (as a DataLoader worker would be forked): the child allocates and
    frees on its own; the parent's chunks and its socket must be unaffected."""
    import os

    p = lib.zico_malloc(args.step_bytes, HOST, None)
    ctypes.memset(p, 9, args.step_bytes)
    pid = os.fork()
    if pid == 0:
        q = lib.zico_malloc(args.step_bytes, HOST, None)
        if q:
            ctypes.memset(q, 4, args.step_bytes)
            lib.zico_free(q, 0, HOST, None)
        lib.zico_free(p, 0, HOST, None)
        za.empty_cache(HOST)  # unmaps in the child only
        os._exit(0 if q else 3)
    _, status = os.waitpid(pid, 0)
    r = lib.zico_malloc(args.step_bytes, HOST, None)
    say(child_status=status, parent_alloc=bool(r), parent_byte=ctypes.string_at(p, 1).hex())
    wait_for("exit")


def run_raise_budget(lib, args):
    """Tries every knob the job has to lift its limit, then asks for more than the agent allows."""
    za.set_budget(None, device=HOST)
    za.set_budget(1 << 50, device=HOST)
    za.set_budget_wait(0, device=HOST)
    ok = []
    for _ in range(args.steps):
        p = lib.zico_malloc(args.step_bytes, HOST, None)
        ok.append(bool(p))
    report = za.last_oom(HOST) or {}
    say(granted=sum(ok), tried=len(ok), reason=report.get("reason"), detail=report.get("detail"),
        reserved=za.memory_stats(device=HOST)["reserved_bytes.all.current"])


def run_torch(args):
    """A small MLP trained on CPU tensors routed through the agent pool by the CPU shim."""
    import torch

    za.install_cpu(scope="all")
    torch.manual_seed(args.job)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(512, 256), torch.randint(0, 10, (512,))
    losses = []
    for it in range(args.iterations):
        za.mark(args.job, "iteration_start", it)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        za.mark(args.job, "iteration_end", it)
        losses.append(loss.item())
    say(done=args.iterations, first_loss=losses[0], last_loss=losses[-1],
        peak_reserved=za.memory_stats(device=HOST)["reserved_bytes.all.peak"])


def run_cuda(args, mode):
    """CUDA device 0 through the agent: write 0xAB and free (cuda-write), read what a new block holds
    (cuda-read), or train a small MLP (cuda-train)."""
    import torch

    za.install_agent_client(device=0)
    za.install_cuda(0)
    n = args.step_bytes
    if mode == "cuda-write":
        x = torch.full((n,), 0xAB, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        del x
        za.empty_cache(0)  # the segment's events are synchronized, then its chunks go back
        say(written=n)
        wait_for("exit")
    elif mode == "cuda-read":
        x = torch.empty((n,), dtype=torch.uint8, device="cuda")
        say(nonzero=int((x != 0).sum()), ab=int((x == 0xAB).sum()), size=n)
    else:
        with za.bind(args.job):
            model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
            opt = torch.optim.SGD(model.parameters(), lr=0.05)
            x, y = torch.randn(512, 256, device="cuda"), torch.randint(0, 10, (512,), device="cuda")
            losses = []
            for it in range(args.iterations):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
        say(done=args.iterations, first_loss=losses[0], last_loss=losses[-1], upstream=za.memory_stats(device=0)
            .get("capacity_bytes"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["ramp", "script", "fork", "greedy", "write", "read", "hold", "raise-budget", "torch",
                                       "cuda-write", "cuda-read", "cuda-train"])
    ap.add_argument("--job", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--step-bytes", type=int, default=12 << 20)
    ap.add_argument("--max-ooms", type=int, default=50)
    args = ap.parse_args()
    if args.mode.startswith("cuda"):
        run_cuda(args, args.mode)
        return
    za.install_agent_client()
    if args.mode == "torch":
        run_torch(args)
        return
    lib = _native.lib()
    with za.bind(args.job):
        {"ramp": run_ramp, "script": run_script, "fork": run_fork, "greedy": run_greedy, "write": run_write, "read": run_read, "hold": run_hold,
         "raise-budget": run_raise_budget}[args.mode](lib, args)


if __name__ == "__main__":
    main()
