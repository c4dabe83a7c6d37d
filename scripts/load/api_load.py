#!/usr/bin/env python
"""Job-list API load check (loopback only): seeds N jobs, starts a real gunicorn server on 127.0.0.1 (or
takes --url of one already running on loopback), then measures GET /api/jobs/ with token auth:

1. baseline: one client, sequential requests, for --baseline-seconds;
2. load: --clients concurrent clients (one keep-alive connection each) for --seconds, or until
   --max-requests requests in all.

Prints p50/p95/p99/max latency (ms), req/s and the server's CPU per request (ms, its processes' user +
system time from /proc; only for the server it starts) of both phases, the load p95 as a ratio of the baseline
p50, and whether the load p95 is under --target-ms (issue 8: 100 ms with 50 clients). Exits 1 when it
is not, or when any request failed. Bounded in time and requests; stops its server by itself.

    .venv/bin/python scripts/load/api_load.py --jobs 2000 --clients 50 --seconds 30

The database (default ``zico_apiload``) is created and migrated if missing; only the ``apiload`` tenant
is (re)seeded. Every request runs the real middleware, authentication and rate-limit throttle (Redis),
with the per-token API limit raised so that the load is not refused.
"""
from __future__ import annotations

import argparse
import http.client
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

from loadcheck import REPO, ensure_database, loopback_only  # scripts/load/ is sys.path[0]

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/zico_apiload")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/10")
# The server runs in production mode (no per-query debug log), over plain HTTP on loopback.
SERVER_ENV = {"DEBUG": "0", "SECRET_KEY": "api-load-check-" + "x" * 40, "ALLOWED_HOSTS": "127.0.0.1,localhost",
              "SECURE_SSL_REDIRECT": "0", "SESSION_COOKIE_SECURE": "0", "CSRF_COOKIE_SECURE": "0",
              "ZICO_RATE_API": "1000000/m", "LOG_LEVEL": "WARNING", "DJANGO_SETTINGS_MODULE": "zico.settings"}
TENANT = "apiload"


def seed(n_jobs: int) -> str:
    """The ``apiload`` tenant with one member and ``n_jobs`` jobs in mixed states (a tenth with a memory
    profile); returns a fresh API token of that member."""
    os.environ.update({k: v for k, v in SERVER_ENV.items() if k != "ZICO_RATE_API"})
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from zico.jobs.models import Job, MemoryProfile
    from zico.tenants.models import ApiToken, Role, Tenant

    statuses = ["queued", "running", "succeeded", "failed", "cancelled", "placed", "ready"]
    with transaction.atomic():
        Tenant.objects.filter(slug=TENANT).delete()
        tenant = Tenant.objects.create(name="API load", slug=TENANT)
        user, _ = get_user_model().objects.get_or_create(username="apiload-user")
        tenant.add_member(user, Role.MEMBER)
        params = {"batch_size": 64, "iterations": 150, "lr": 0.05, "precision": "fp32", "optimizer": "sgd",
                  "seed": 0, "data": "real", "image_size": 16}
        jobs = Job.objects.bulk_create(
            Job(tenant=tenant, owner=user, name=f"load-{i}", workload="digits-cnn", params=params,
                status=statuses[i % len(statuses)], total_iterations=150, progress_iteration=i % 150)
            for i in range(n_jobs))
        curve = {"version": 1, "source": "estimate", "device": "cpu", "iteration_s": 0.05,
                 "persistent_bytes": 1 << 20, "peak_bytes": 8 << 20,
                 "points": [[k / 20, (1 << 20) + k * (1 << 18)] for k in range(21)]}
        MemoryProfile.objects.bulk_create(
            MemoryProfile(job=j, source="estimate", curve=curve, peak_bytes=8 << 20, persistent_bytes=1 << 20,
                          iteration_s=0.05) for j in jobs[::10])
    _, raw = ApiToken.issue(user, "api-load")
    return raw


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(workers: int, threads: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, "-m", "gunicorn", "zico.wsgi:application", "--bind", f"127.0.0.1:{port}",
           "--workers", str(workers), "--worker-class", "gthread", "--threads", str(threads),
           "--keep-alive", "30", "--log-level", "warning", "--chdir", str(REPO / "platform")]
    proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, **SERVER_ENV}, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"gunicorn exited with {proc.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            conn.getresponse().read()
            return proc, url
        except OSError:
            time.sleep(0.3)
    stop_server(proc)
    sys.exit("gunicorn did not answer within 60 s")


def server_cpu_s(proc: subprocess.Popen | None) -> float | None:
    """CPU seconds (user + system) used so far by the server's processes (its session, from /proc): per
    request, a cost that does not grow with the machine's load as latency does. None for --url."""
    if proc is None:
        return None
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # exited meanwhile
            if int(fields[3]) == proc.pid:  # process group: gunicorn runs in its own session
                total += int(fields[11]) + int(fields[12])
    return total / tick


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class Run:
    """Shared state of one phase: latencies (s), failures, and the request budget."""

    def __init__(self, max_requests: int, deadline: float):
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.budget = max_requests
        self.deadline = deadline
        self.lock = threading.Lock()

    def take(self) -> bool:
        with self.lock:
            if self.budget <= 0 or time.monotonic() >= self.deadline:
                return False
            self.budget -= 1
            return True


def client(url: str, path: str, token: str, run: Run, think_s: float, conditional: bool = False) -> None:
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    rng = random.Random()
    if think_s:
        time.sleep(rng.uniform(0, think_s))  # staggered starts: no thundering herd
    while run.take():
        t0 = time.perf_counter()
        try:
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            resp.read()
            ok = resp.status == 200 or (conditional and resp.status == 304)
            if conditional and resp.getheader("ETag"):
                headers["If-None-Match"] = resp.getheader("ETag")  # as a browser revalidates its copy
            detail = f"HTTP {resp.status}"
        except (OSError, http.client.HTTPException) as exc:
            ok, detail = False, repr(exc)
            conn.close()
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
        elapsed = time.perf_counter() - t0
        with run.lock:
            (run.latencies if ok else run.failures).append(elapsed if ok else detail)
        if think_s:
            time.sleep(rng.uniform(0.5, 1.5) * think_s)
    conn.close()


def phase(url: str, path: str, token: str, clients: int, seconds: float, max_requests: int,
          think_s: float, conditional: bool = False) -> dict:
    run = Run(max_requests, time.monotonic() + seconds)
    t0 = time.monotonic()
    threads = [threading.Thread(target=client, args=(url, path, token, run, think_s, conditional), daemon=True)
               for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 30)
    wall = time.monotonic() - t0
    lat = sorted(run.latencies)
    q = statistics.quantiles(lat, n=100, method="inclusive") if len(lat) >= 2 else [float("nan")] * 99
    return {"requests": len(lat), "failed": len(run.failures), "first_failure": run.failures[:1],
            "req_s": len(lat) / wall, "p50": q[49] * 1e3, "p95": q[94] * 1e3, "p99": q[98] * 1e3,
            "max": (lat[-1] if lat else float("nan")) * 1e3, "wall_s": wall}


def show(name: str, r: dict, cpu_s: float | None) -> None:
    cpu = f"  server cpu {1e3 * cpu_s / r['requests']:5.1f} ms/req" if cpu_s is not None and r["requests"] else ""
    print(f"{name:9s} requests {r['requests']:6d}  failed {r['failed']:3d}  {r['req_s']:7.1f} req/s  "
          f"p50 {r['p50']:7.1f} ms  p95 {r['p95']:7.1f} ms  p99 {r['p99']:7.1f} ms  max {r['max']:7.1f} ms"
          + cpu, flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="a running server on loopback (else one is started); needs --token")
    ap.add_argument("--token", help="API token for --url (else one is seeded)")
    ap.add_argument("--jobs", type=int, default=2000, help="jobs to seed (default 2000)")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=30.0, help="load phase length (at most 300)")
    ap.add_argument("--baseline-seconds", type=float, default=5.0)
    ap.add_argument("--max-requests", type=int, default=50_000, help="load phase request cap")
    ap.add_argument("--think-ms", type=float, default=0.0,
                    help="mean pause of each client between requests (uniform 0.5x-1.5x; starts staggered); "
                         "0: closed loop, every client fires again at once")
    ap.add_argument("--conditional", action="store_true",
                    help="clients send the last ETag back (If-None-Match); a 304 counts as an answer")
    ap.add_argument("--path", default="/api/jobs/", help="default: the job list's first page (PAGE_SIZE, 25 jobs)")
    ap.add_argument("--workers", type=int, default=4, help="gunicorn worker processes")
    ap.add_argument("--threads", type=int, default=4, help="threads per gunicorn worker (gthread)")
    ap.add_argument("--target-ms", type=float, default=100.0, help="p95 target under load")
    a = ap.parse_args()
    if not (0 < a.seconds <= 300 and 0 < a.clients <= 500 and 0 < a.max_requests <= 1_000_000):
        ap.error("--seconds in (0, 300], --clients in (0, 500], --max-requests in (0, 1e6]")
    proc = None
    try:
        if a.url:
            loopback_only(a.url)
            if not a.token:
                ap.error("--url needs --token")
            url, token = a.url.rstrip("/"), a.token
        else:
            ensure_database(os.environ["DATABASE_URL"], {**os.environ, **SERVER_ENV})
            token = seed(a.jobs)
            proc, url = start_server(a.workers, a.threads)
        print(f"server {url}  path {a.path}  jobs seeded {a.jobs if not a.url else '-'}  "
              f"gunicorn {a.workers} workers x {a.threads} threads  cpus {os.cpu_count()}", flush=True)
        phase(url, a.path, token, 1, 1.0, 50, 0.0)  # warm-up: connections, caches, lazy imports
        cpu0 = server_cpu_s(proc)
        base = phase(url, a.path, token, 1, a.baseline_seconds, 10_000, 0.0, a.conditional)
        cpu1 = server_cpu_s(proc)
        show("baseline", base, cpu1 - cpu0 if proc else None)
        load = phase(url, a.path, token, a.clients, a.seconds, a.max_requests, a.think_ms / 1e3, a.conditional)
        show(f"{a.clients} clients", load, server_cpu_s(proc) - cpu1 if proc else None)
        ratio = load["p95"] / base["p50"] if base["p50"] else float("nan")
        verdict = "PASS" if load["p95"] < a.target_ms and not load["failed"] else "FAIL"
        print(f"load p95 / baseline p50 = {ratio:.1f}x;  p95 {load['p95']:.1f} ms vs target {a.target_ms:.0f} ms: "
              f"{verdict}" + (f"  (first failure: {load['first_failure'][0]})" if load["failed"] else ""))
        return 0 if verdict == "PASS" else 1
    finally:
        if proc is not None:
            stop_server(proc)


if __name__ == "__main__":
    sys.exit(main())
