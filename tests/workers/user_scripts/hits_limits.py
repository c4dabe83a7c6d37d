"""Runs into one of the sandbox's resource limits, as a careless script would; prints what it saw.

    python hits_limits.py cpu                  spin until the CPU time limit stops the process (SIGXCPU)
    python hits_limits.py nofile [--raise]     open files until EMFILE; print how many and the highest fd; --raise: let it propagate
    python hits_limits.py nproc [--hold FILE] [--raise]  fork children until EAGAIN; print the tasks of this uid
                                               then; --hold: keep the children until FILE exists
    python hits_limits.py fsize [--raise]      write one file until EFBIG; print its size

Each mode prints ``LIMIT {json}`` on stdout before it ends (cpu prints its start only: it never ends itself).
"""
import errno
import json
import os
import resource
import sys
import time

import torch  # a plain PyTorch script: one step, so the job is a training job like any other

from uidtasks import uid_tasks  # beside this script

model = torch.nn.Linear(4, 1)
torch.optim.SGD(model.parameters(), lr=0.1).step()


def report(**fields):
    print("LIMIT " + json.dumps(fields), flush=True)


mode = sys.argv[1]
if mode == "cpu":
    report(mode=mode, cpu_s_at_start=round(time.process_time(), 2))
    x = 0
    while True:
        x += 1
elif mode == "nofile":
    files = []
    try:
        while True:
            files.append(open("/job/code/hits_limits.py"))
    except OSError as exc:
        highest = max(f.fileno() for f in files)  # the lowest free number is given: all below it are taken
        files.pop().close()  # one fd free for the listing
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        report(mode=mode, opened=len(files) + 1, errno=errno.errorcode.get(exc.errno), highest_fd=highest,
               inherited_above_limit=sum(int(fd) >= limit for fd in os.listdir("/proc/self/fd")))
        if "--raise" in sys.argv:
            raise
elif mode == "nproc":
    children, release = [], os.pipe()
    try:
        while True:
            pid = os.fork()
            if pid == 0:  # a child waits until the parent closes the pipe, then leaves
                os.close(release[1])
                os.read(release[0], 1)
                os._exit(0)
            children.append(pid)
    except OSError as exc:
        report(mode=mode, forked=len(children), errno=errno.errorcode.get(exc.errno), uid=os.getuid(),
               uid_tasks=uid_tasks(), own_threads=len(os.listdir("/proc/self/task")))
        if "--raise" in sys.argv:  # the children stay until this process has ended
            raise
    if "--hold" in sys.argv:
        hold = sys.argv[sys.argv.index("--hold") + 1]
        while not os.path.exists(hold):
            time.sleep(0.05)
    os.close(release[1])
    for pid in children:
        os.waitpid(pid, 0)
elif mode == "fsize":
    path, block = os.path.join(os.environ["ZICO_OUTPUT_DIR"], "big.bin"), b"\0" * (256 << 10)
    try:
        with open(path, "wb", buffering=0) as f:
            while True:
                f.write(block)
    except OSError as exc:
        report(mode=mode, errno=errno.errorcode.get(exc.errno), size=os.path.getsize(path))
        if "--raise" in sys.argv:
            raise
else:
    sys.exit(f"unknown mode {mode}")
