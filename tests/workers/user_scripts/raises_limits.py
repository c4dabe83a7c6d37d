"""A hostile script: tries to lift the limits it runs under from inside, then forks until the process limit.

It tries to raise every rlimit (soft and hard) to unlimited, to write -1000 (never OOM-killed) to
/proc/self/oom_score_adj, to drop no_new_privs and take capabilities with prctl, to become root, to raise its
priority (nice, ioprio), to widen its CPU affinity to every core of the host, and to make a user namespace of its
own. It prints ``RAISE {json}``: each attempt's result ("ok" or the error) and what holds afterwards. Then it
forks until EAGAIN and lets the error propagate: a limit it raised would show here."""
import ctypes
import errno
import json
import os
import resource

import torch

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model(torch.randn(16, 8)).pow(2).mean().backward()
opt.step()
libc = ctypes.CDLL(None, use_errno=True)
tried = {}


def attempt(name, fn):
    try:
        got = fn()
        tried[name] = "ok" if got in (None, 0) else f"returned {got}"
    except OSError as exc:
        tried[name] = f"{type(exc).__name__} {errno.errorcode.get(exc.errno, exc.errno)}"
    except Exception as exc:  # setrlimit's ValueError for a soft limit above the hard one
        tried[name] = f"{type(exc).__name__}: {exc}"


def call(fn, *args):
    if fn(*args) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


before = {n: resource.getrlimit(getattr(resource, n)) for n in ("RLIMIT_NPROC", "RLIMIT_NOFILE", "RLIMIT_CPU",
                                                                 "RLIMIT_FSIZE", "RLIMIT_AS", "RLIMIT_CORE")}
for n in before:
    attempt(f"setrlimit {n} unlimited", lambda n=n: resource.setrlimit(
        getattr(resource, n), (resource.RLIM_INFINITY, resource.RLIM_INFINITY)))
    attempt(f"setrlimit {n} soft to hard", lambda n=n: resource.setrlimit(getattr(resource, n), (before[n][1],) * 2))
    attempt(f"prlimit {n} x2", lambda n=n: resource.prlimit(0, getattr(resource, n), tuple(
        v if v == resource.RLIM_INFINITY else 2 * v for v in before[n])))


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


attempt("oom_score_adj -1000", lambda: write("/proc/self/oom_score_adj", "-1000"))
attempt("oom_adj -17", lambda: write("/proc/self/oom_adj", "-17"))
PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, PR_SET_DUMPABLE = 38, 47, 2, 4
attempt("prctl no_new_privs 0", lambda: call(libc.prctl, PR_SET_NO_NEW_PRIVS, 0, 0, 0, 0))
attempt("prctl ambient CAP_SYS_RESOURCE", lambda: call(libc.prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, 24, 0, 0))
attempt("prctl dumpable", lambda: call(libc.prctl, PR_SET_DUMPABLE, 1, 0, 0, 0))
attempt("setuid 0", lambda: os.setuid(0))
attempt("setgid 0", lambda: os.setgid(0))
attempt("nice -10", lambda: os.nice(-10) and None)
attempt("ioprio realtime", lambda: call(libc.syscall, 251, 1, 0, (1 << 13) | 0))  # ioprio_set(PROCESS, self, RT 0)
own_cpus = sorted(os.sched_getaffinity(0))
attempt("sched_setaffinity all", lambda: os.sched_setaffinity(0, range(os.cpu_count())))
attempt("unshare user namespace", lambda: call(libc.unshare, 0x10000000))
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
after = {
    "rlimits": {n: list(resource.getrlimit(getattr(resource, n))) for n in before},
    "rlimits_before": {n: list(v) for n, v in before.items()},
    "oom_score_adj": open("/proc/self/oom_score_adj").read().strip(),
    "uid": os.getuid(), "euid": os.geteuid(), "nice": os.nice(0),
    "cpus_before": own_cpus, "cpus_after": sorted(os.sched_getaffinity(0)), "host_cpus": os.cpu_count(),
    "CapEff": status.get("CapEff", "").strip(), "NoNewPrivs": status.get("NoNewPrivs", "").strip(),
}
print("RAISE " + json.dumps({"tried": tried, "after": after}), flush=True)
children, release = [], os.pipe()
while True:
    pid = os.fork()  # EAGAIN at the process limit: raised, the job fails naming it
    if pid == 0:
        os.close(release[1])
        os.read(release[0], 1)
        os._exit(0)
    children.append(pid)
