"""Tries, from inside a job, what the sandbox must prevent; prints one JSON line of what each attempt got.

python probe_sandbox.py --read PATH... --connect HOST:PORT... --write PATH... --env NAME...
Each result is "ok" (the attempt succeeded: a hole) or the exception's class and errno."""
import argparse
import json
import os
import socket


def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as exc:
        return f"{type(exc).__name__} errno={exc.errno}"


def read(path):
    with open(path, "rb") as fh:
        fh.read(1)


def listdir(path):
    os.listdir(path)


def connect(addr):
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5):
        pass


def write(path):
    with open(path, "w") as fh:
        fh.write("x")


ap = argparse.ArgumentParser()
for name in ("read", "list", "connect", "write", "env"):
    ap.add_argument(f"--{name}", nargs="*", default=[])
a = ap.parse_args()
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
out = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "CapEff": status["CapEff"].strip(),
       "CapBnd": status["CapBnd"].strip(), "NoNewPrivs": status["NoNewPrivs"].strip(),
       "read": {p: attempt(lambda p=p: read(p)) for p in a.read},
       "list": {p: attempt(lambda p=p: listdir(p)) for p in a.list},
       "connect": {c: attempt(lambda c=c: connect(c)) for c in a.connect},
       "write": {p: attempt(lambda p=p: write(p)) for p in a.write},
       "env": {n: n in os.environ for n in a.env},
       "proc1_environ": attempt(lambda: read("/proc/1/environ")),
       "processes": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
       "output_writable": attempt(lambda: write(os.path.join(os.environ["ZICO_OUTPUT_DIR"], "result.txt"))),
       "scratch_writable": attempt(lambda: write(os.path.join(os.environ["ZICO_SCRATCH_DIR"], "s.txt"))),
       "tmp_writable": attempt(lambda: write("/tmp/t.txt"))}
print("PROBE " + json.dumps(out))
