"""Note [A job keeps its CPU slot] (workers.agent.seccomp): under the filter bwrap loads, a process cannot change
its CPU affinity, by any ABI's call, and everything else still runs; the program is well-formed for each known
architecture and absent for others. Real bwrap, real kernel."""
import os
import subprocess
import sys

import pytest

from workers.agent import seccomp
from workers.agent.sandbox import TASKSET

BWRAP = "/usr/bin/bwrap"
PROBE = """
import os
before = sorted(os.sched_getaffinity(0))
try:
    os.sched_setaffinity(0, range(os.cpu_count()))
    print("widened", sorted(os.sched_getaffinity(0)))
except OSError as exc:
    print("refused", exc.errno, before, sorted(os.sched_getaffinity(0)))
"""


@pytest.mark.skipif(not os.path.exists(BWRAP) or seccomp.affinity_filter() is None,
                    reason="no bubblewrap or no filter for this architecture")
def test_under_the_filter_a_pinned_process_cannot_widen_its_affinity():
    program = seccomp.affinity_filter()
    fd = os.memfd_create("zico-seccomp-test", 0)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    base = [BWRAP, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--die-with-parent"]
    try:
        locked = subprocess.run([TASKSET, "--cpu-list", "0", *base, "--seccomp", str(fd), sys.executable, "-c", PROBE],
                                pass_fds=[fd], capture_output=True, text=True, timeout=60)
    finally:
        os.close(fd)
    assert locked.returncode == 0, locked.stderr
    assert locked.stdout.split()[:2] == ["refused", "1"], locked.stdout  # EPERM; it still runs and reads
    assert locked.stdout.strip().endswith("[0] [0]"), locked.stdout
    if os.cpu_count() > 1:  # without the filter the same call widens it: the test can fail
        free = subprocess.run([TASKSET, "--cpu-list", "0", *base, sys.executable, "-c", PROBE], capture_output=True,
                              text=True, timeout=60)
        assert free.stdout.startswith("widened"), free.stdout


def test_the_program_is_whole_instructions_for_each_known_architecture_and_none_for_others():
    for machine in ("x86_64", "aarch64"):
        program = seccomp.affinity_filter(machine)
        assert program and len(program) % 8 == 0  # struct sock_filter: 8 bytes each
    assert seccomp.affinity_filter("riscv64") is None
