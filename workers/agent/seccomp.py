"""The seccomp filter a sandboxed job runs under: its CPU slot cannot be widened from inside.

Note [A job keeps its CPU slot]
    A CPU device's job runs on its slot's cores (Note [Compute per slot] in zico_contracts.cpushare), set as its
    CPU affinity. An affinity is the process's own to change: a job called ``sched_setaffinity`` with every core
    and took its neighbour's (tests/workers/test_containment_suite.py, "raises its own limits"). So the agent
    pins the sandbox from outside before anything in it runs (``taskset`` before ``bwrap``: workers.agent.sandbox)
    and bwrap installs this filter (``--seccomp``) before it executes the job: ``sched_setaffinity`` fails with
    EPERM for every thread of the job, whichever ABI it calls it through (x86-64, x32 and i386 on x86-64; arm64
    and arm32 on aarch64); every other call is allowed. A cpuset cgroup per job would hold it as well, but a
    worker inside a container does not always own a cgroup it may split. On another architecture there is no
    filter (:func:`affinity_filter` returns None) and the slot stays an affinity the job could widen.
    A side effect, measured: torch's CPU probe (cpuinfo) steps onto each core with ``sched_setaffinity``; refused,
    it finds the slot's cores only, so torch's default thread count (and its cap on ``OMP_NUM_THREADS``) is the
    slot's core count, not the host's; its instruction set is found as before (AVX512 here), and a 512 x 512
    matmul ran no slower (0.44 s against 0.51 s for 200 on one core).

The program is classic BPF as ``seccomp(2)`` takes it (``struct sock_filter``: u16 code, u8 jt, u8 jf, u32 k),
checked by the kernel when bwrap loads it. Standard library only.
"""
from __future__ import annotations

import errno
import platform as _platform  # the standard library's module (the machine's architecture)
import struct

# <linux/filter.h>, <linux/seccomp.h>, <linux/audit.h>
_LD_W_ABS, _JEQ_K, _RET_K = 0x20, 0x15, 0x06
_OFFSET_NR, _OFFSET_ARCH = 0, 4  # struct seccomp_data
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
_X32_BIT = 0x40000000
# architecture -> {audit arch: sched_setaffinity's numbers under it}, from each ABI's syscall table
_DENIED = {
    "x86_64": {0xC000003E: (203, _X32_BIT | 203), 0x40000003: (241,)},  # x86-64 (and x32), i386
    "aarch64": {0xC00000B7: (122,), 0x40000028: (241,)},                  # arm64, arm32 (EABI)
}


def _op(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def affinity_filter(machine: str | None = None) -> bytes | None:
    """The compiled filter for ``machine`` (default: this host's, ``platform.machine()``): EPERM for
    ``sched_setaffinity``, everything else allowed (Note [A job keeps its CPU slot]); None where this module
    knows no syscall numbers for the architecture."""
    arches = _DENIED.get(machine or _platform.machine())
    if arches is None:
        return None
    deny = _op(_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.EPERM)
    allow = _op(_RET_K, 0, 0, SECCOMP_RET_ALLOW)
    prog = [_op(_LD_W_ABS, 0, 0, _OFFSET_ARCH)]
    blocks = []
    for arch, numbers in arches.items():  # per arch: load the number, one test per number, else allow
        block = [_op(_LD_W_ABS, 0, 0, _OFFSET_NR)]
        for i, nr in enumerate(numbers):
            block.append(_op(_JEQ_K, len(numbers) - i, 0, nr))  # to the deny after the block's allow
        block += [allow, deny]
        blocks.append((arch, block))
    # the arch tests: each jumps to its block; no match: allow (an ABI the kernel would refuse anyway)
    tests = len(blocks)
    offset = 1  # past the final allow of the tests
    for i, (arch, block) in enumerate(blocks):
        prog.append(_op(_JEQ_K, (tests - i - 1) + offset, 0, arch))
        offset += len(block)
    prog.append(allow)
    for _, block in blocks:
        prog += block
    return b"".join(prog)
